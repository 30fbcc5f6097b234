// Tests of key parts in reads (key_part.h): every type with its exact messages, and every
// timestamp spelling of the shared table.
#include "engine/derived/key_part.h"

#include <gtest/gtest.h>

#include <random>

#include "core/calendar.h"
#include "core/timestamp.h"
#include "core/timestamp_test_cases.h"

namespace tally::derived {
namespace {

using definitions::Type;

TEST(ParseKeyPartTest, EveryType) {
  auto part = [](Type type, std::string_view text) -> std::string {
    auto value = ParseKeyPart(type, text);
    if (!value) return "error: " + value.error().message;
    return definitions::DebugString(*value);
  };
  EXPECT_EQ(part(Type::kInt64, "42"), "42");
  EXPECT_EQ(part(Type::kInt64, "-7"), "-7");
  EXPECT_EQ(part(Type::kInt64, "007"), "7");
  EXPECT_EQ(part(Type::kInt64, "9223372036854775807"), "9223372036854775807");
  EXPECT_EQ(part(Type::kInt64, "-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(part(Type::kInt64, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kInt64, "9223372036854775808"),
            "error: \"9223372036854775808\" is out of the int64 range");
  EXPECT_EQ(part(Type::kInt64, ""), "error: \"\" is not an int64");
  EXPECT_EQ(part(Type::kInt64, "+1"), "error: \"+1\" is not an int64");
  EXPECT_EQ(part(Type::kInt64, "1.0"), "error: \"1.0\" is not an int64");
  EXPECT_EQ(part(Type::kInt64, " 1"), "error: \" 1\" is not an int64");
  EXPECT_EQ(part(Type::kInt64, "-"), "error: \"-\" is not an int64");
  EXPECT_EQ(part(Type::kBool, "true"), "true");
  EXPECT_EQ(part(Type::kBool, "false"), "false");
  EXPECT_EQ(part(Type::kBool, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kBool, "TRUE"), "error: \"TRUE\" is not a bool (true or false)");
  EXPECT_EQ(part(Type::kBool, "1"), "error: \"1\" is not a bool (true or false)");
  EXPECT_EQ(part(Type::kText, "a:b\\c"), "'a:b\\c'");
  EXPECT_EQ(part(Type::kText, ""), "''");
  EXPECT_EQ(part(Type::kText, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kTimestamp, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kTimestamp, "x"),
            "error: \"x\" is not a timestamp (2024-05-01T13:45:00Z or 20240501T134500Z)");
  // Every spelling of the shared table.
  for (const timestamp_cases::Case& c : timestamp_cases::kCases) {
    auto value = ParseKeyPart(Type::kTimestamp, c.text);
    if ((c.readers & timestamp_cases::kKeyPart) != 0) {
      ASSERT_TRUE(value) << c.text << ": " << value.error().message;
      EXPECT_EQ(FormatTimestamp(value->i), c.instant) << c.text;
    } else {
      EXPECT_FALSE(value) << c.text << " read as " << definitions::DebugString(*value);
    }
  }
  // Every key spelling of FormatTimestamp parses back.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const int64_t low = MicrosFromCivil(1, 1, 1);
    const int64_t high = MicrosFromCivil(9999, 12, 31, 23, 59, 59, 999999);
    const int64_t micros = low + static_cast<int64_t>(rng() % static_cast<uint64_t>(high - low));
    auto value = ParseKeyPart(Type::kTimestamp, FormatTimestamp(micros));
    ASSERT_TRUE(value) << FormatTimestamp(micros);
    ASSERT_EQ(value->i, micros) << FormatTimestamp(micros);
  }
}

}  // namespace
}  // namespace tally::derived
