#include "core/integer.h"

#include <gtest/gtest.h>

namespace tally {
namespace {

TEST(ParseInt64, AcceptsRedisSpellings) {
  EXPECT_EQ(ParseInt64("0"), 0);
  EXPECT_EQ(ParseInt64("42"), 42);
  EXPECT_EQ(ParseInt64("-7"), -7);
  EXPECT_EQ(ParseInt64("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(ParseInt64("-9223372036854775808"), INT64_MIN);
}

TEST(ParseInt64, RefusesEverythingElse) {
  for (const char* text :
       {"", "-", "+1", " 1", "1 ", "01", "-0", "1.5", "abc", "1e3", "9223372036854775808",
        "-9223372036854775809", "99999999999999999999", "123456789012345678901",
        // uint64's largest and one past it: the magnitude's own overflow, then int64's
        "18446744073709551615", "18446744073709551616", "-18446744073709551616",
        // the bytes on either side of the digits, and one with the high bit set
        "1/", "1:", "\xb1"}) {
    EXPECT_EQ(ParseInt64(text), std::nullopt) << text;
  }
}

TEST(ParseUint64, AcceptsDigitsWithinRange) {
  EXPECT_EQ(ParseUint64("0"), 0u);
  EXPECT_EQ(ParseUint64("42"), 42u);
  EXPECT_EQ(ParseUint64("0000000000000017"), 17u);  // a log segment's fixed width
  EXPECT_EQ(ParseUint64("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseUint64("000000000000000000000018446744073709551615"), UINT64_MAX);
}

TEST(ParseUint64, RefusesEverythingElse) {
  for (const char* text : {"", "-1", "+1", " 1", "1 ", "1.5", "abc", "1e3", "0x10",
                           // one past uint64's largest, and far past it
                           "18446744073709551616", "99999999999999999999",
                           // the bytes on either side of the digits, and one with the high bit
                           "1/", "1:", "\xb1"}) {
    EXPECT_EQ(ParseUint64(text), std::nullopt) << text;
  }
}

TEST(FormatInt64, RoundTrips) {
  char buf[24];
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{123456789}, INT64_MAX, INT64_MIN}) {
    const int n = FormatInt64(v, buf);
    EXPECT_EQ(ParseInt64(std::string_view(buf, n)), v);
  }
}

TEST(CheckedAdd, DetectsOverflow) {
  EXPECT_EQ(CheckedAdd(INT64_MAX, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(INT64_MIN, -1), std::nullopt);
  EXPECT_EQ(CheckedAdd(INT64_MAX, -1), INT64_MAX - 1);
}

}  // namespace
}  // namespace tally
