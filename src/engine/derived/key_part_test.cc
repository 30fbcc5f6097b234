// Tests of key parts in reads (key_part.h): every type, the text rule's edge cases (':',
// '\', "\N", empty text, bytes that are not UTF-8) with their exact messages, and the
// round trip: every part of every canonical key, as KeyPartText splits it, reads back as
// the value it was written from.
#include "engine/derived/key_part.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/calendar.h"
#include "core/timestamp.h"
#include "core/timestamp_test_cases.h"

namespace tally::derived {
namespace {

using definitions::Type;
using definitions::Value;

TEST(ParseKeyPartTest, EveryType) {
  auto part = [](Type type, std::string_view text) -> std::string {
    std::string storage;
    auto value = ParseKeyPart(type, text, &storage);
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
  EXPECT_EQ(part(Type::kTimestamp, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kTimestamp, "x"),
            "error: \"x\" is not a timestamp (2024-05-01T13:45:00Z or 20240501T134500Z)");
  // Every spelling of the shared table.
  for (const timestamp_cases::Case& c : timestamp_cases::kCases) {
    std::string storage;
    auto value = ParseKeyPart(Type::kTimestamp, c.text, &storage);
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
    std::string storage;
    auto value = ParseKeyPart(Type::kTimestamp, FormatTimestamp(micros), &storage);
    ASSERT_TRUE(value) << FormatTimestamp(micros);
    ASSERT_EQ(value->i, micros) << FormatTimestamp(micros);
  }
}

// The text a part names, or the error.
std::string Text(std::string_view part) {
  std::string storage = "left over";
  auto value = ParseKeyPart(Type::kText, part, &storage);
  if (!value) return "error: " + value.error().message;
  if (value->is_null()) return "NULL";
  EXPECT_EQ(value->type, Type::kText);
  return "text " + std::string(value->s);
}

TEST(ParseKeyPartTest, TextIsSpelledAsInTheKey) {
  EXPECT_EQ(Text("plain"), "text plain");
  EXPECT_EQ(Text(""), "text ");
  EXPECT_EQ(Text("re\\:turn"), "text re:turn");
  EXPECT_EQ(Text("a\\\\b"), "text a\\b");
  EXPECT_EQ(Text("\\\\"), "text \\");
  EXPECT_EQ(Text("\\:"), "text :");
  EXPECT_EQ(Text("\\:\\:\\\\"), "text ::\\");
  EXPECT_EQ(Text("\\N"), "NULL");
  EXPECT_EQ(Text("\\\\N"), "text \\N");
  EXPECT_EQ(Text("N"), "text N");
  EXPECT_EQ(Text("caf\xc3\xa9 \xf0\x9f\x98\x80"), "text caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(Text("\xff\xfe\x80"), "text \xff\xfe\x80");  // bytes, UTF-8 or not
  EXPECT_EQ(Text(std::string("a\0b", 3)), "text " + std::string("a\0b", 3));
  EXPECT_EQ(Text("a/b?c%20 d\n"), "text a/b?c%20 d\n");
  const std::string rule =
      " (text in a key part is spelled as in the key: \\: for ':', \\\\ for '\\', and \\N "
      "alone is NULL)";
  EXPECT_EQ(Text("re:turn"), "error: ':' at byte 2 must be written \\:" + rule);
  EXPECT_EQ(Text(":"), "error: ':' at byte 0 must be written \\:" + rule);
  EXPECT_EQ(Text("a\\"), "error: '\\' at byte 1 must be written \\\\" + rule);
  EXPECT_EQ(Text("\\"), "error: '\\' at byte 0 must be written \\\\" + rule);
  EXPECT_EQ(Text("a\\Nb"), "error: '\\' at byte 1 must be written \\\\" + rule);
  EXPECT_EQ(Text("\\N\\N"), "error: '\\' at byte 0 must be written \\\\" + rule);
  EXPECT_EQ(Text("\\\\\\"), "error: '\\' at byte 2 must be written \\\\" + rule);
  EXPECT_EQ(Text("x\\n"), "error: '\\' at byte 1 must be written \\\\" + rule);
}

// Every part of a canonical key, cut out by KeyPartText as a client splits a listed key,
// reads back as the value the key was written from: so every group can be named.
TEST(ParseKeyPartTest, EveryPartOfEveryKeyReadsBack) {
  static constexpr std::string_view kPieces[] = {
      "a", ":", "\\", "\\N", "N", "\\:", "::", "\xff", "\xc3\xa9", " ", "/", "%", ""};
  const Type types[] = {Type::kText, Type::kInt64, Type::kText, Type::kBool, Type::kTimestamp};
  std::mt19937_64 rng(12);
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::string> texts(std::size(types));
    std::vector<Value> values;
    for (size_t i = 0; i < std::size(types); ++i) {
      if (rng() % 6 == 0) {
        values.push_back(Value::Null());
        continue;
      }
      switch (types[i]) {
        case Type::kText:
          for (size_t n = rng() % 6; n > 0; --n) texts[i] += kPieces[rng() % std::size(kPieces)];
          values.push_back(Value::Text(texts[i]));
          break;
        case Type::kInt64:
          values.push_back(Value::Int(static_cast<int64_t>(rng())));
          break;
        case Type::kBool:
          values.push_back(Value::Bool(rng() % 2 == 0));
          break;
        default:
          values.push_back(Value::Timestamp(static_cast<int64_t>(rng() % (uint64_t{1} << 58))));
          break;
      }
    }
    const std::string key = definitions::EncodeKey("c", values);
    for (size_t i = 0; i < values.size(); ++i) {
      const std::optional<std::string_view> spelling = definitions::KeyPartText(key, i);
      ASSERT_TRUE(spelling) << key;
      std::string storage;
      auto value = ParseKeyPart(types[i], *spelling, &storage);
      ASSERT_TRUE(value) << key << " part " << i << ": " << value.error().message;
      ASSERT_EQ(value->type, values[i].type) << key << " part " << i;
      ASSERT_EQ(value->i, values[i].i) << key << " part " << i;
      ASSERT_EQ(value->s, values[i].s) << key << " part " << i;
    }
  }
}

}  // namespace
}  // namespace tally::derived
