// Tests of the timestamp spellings: the shared table of every spelling (each reader's own
// test runs it too), the reasons of refusals, instants, and the key spelling read back.
#include "core/timestamp.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>

#include "core/calendar.h"
#include "core/timestamp_test_cases.h"

namespace tally {
namespace {

using timestamp_cases::kAll;
using timestamp_cases::kInstant;

// One rule: every reader takes a spelling or none does; only instants add Unix seconds.
TEST(TimestampTest, EveryReaderTakesTheSameSpellings) {
  for (const timestamp_cases::Case& c : timestamp_cases::kCases) {
    EXPECT_TRUE(c.readers == 0 || c.readers == kInstant || c.readers == kAll) << c.text;
    const Result<int64_t> timestamp = ParseTimestamp(c.text);
    if (c.readers == kAll) {
      ASSERT_TRUE(timestamp) << c.text << ": " << timestamp.error().message;
      EXPECT_EQ(FormatTimestamp(*timestamp), c.instant) << c.text;
    } else {
      EXPECT_FALSE(timestamp) << c.text << " read as " << FormatTimestamp(*timestamp);
      if (!timestamp) {
        EXPECT_EQ(timestamp.error().code, ErrorCode::kInvalidArgument);
      }
    }
    const Result<int64_t> instant = ParseInstant(c.text);
    if ((c.readers & kInstant) != 0) {
      ASSERT_TRUE(instant) << c.text << ": " << instant.error().message;
      EXPECT_EQ(FormatTimestamp(*instant), c.instant) << c.text;
    } else {
      EXPECT_FALSE(instant) << c.text << " read as " << FormatTimestamp(*instant);
    }
  }
}

TEST(TimestampTest, RefusalsSayWhy) {
  const auto why = [](std::string_view text) {
    const Result<int64_t> micros = ParseTimestamp(text);
    return micros ? "read as " + FormatTimestamp(*micros) : micros.error().message;
  };
  const std::string not_iso =
      "is not in ISO 8601 format (2024-05-01, 2024-05-01T13:45:07.123456+02:00 or "
      "20240501T134507Z)";
  EXPECT_EQ(why(""), not_iso);
  EXPECT_EQ(why("05/01/2024"), not_iso);
  EXPECT_EQ(why("2024-05-01T12"), not_iso);
  EXPECT_EQ(why("2024-05-01 13:45:07."), not_iso);
  EXPECT_EQ(why("20240501T000000"), not_iso);
  EXPECT_EQ(why("1714521600"), not_iso);
  EXPECT_EQ(why("2024-05-01 13:45:07 UTC"), "has unexpected text ' UTC'");
  EXPECT_EQ(why("2024-05-01Z"), "has unexpected text 'Z'");
  EXPECT_EQ(why("2024-05-01T12:00:00Zjunk"), "has unexpected text 'junk'");
  EXPECT_EQ(why("20240501T000000+0200"), "has unexpected text '+0200'");
  EXPECT_EQ(why("2023-02-29"), "is not a valid date");
  EXPECT_EQ(why("0000-01-01"), "is not a valid date");
  EXPECT_EQ(why("20241301T000000Z"), "is not a valid date");
  EXPECT_EQ(why("2024-05-01 24:00:01"), "has an invalid time of day");
  EXPECT_EQ(why("2016-12-31 23:59:60.5"), "has an invalid time of day");
  EXPECT_EQ(why("2024-05-01 13:45:07+2"), "has an invalid UTC offset");
  EXPECT_EQ(why("2024-05-01 13:45:07+16"), "has an invalid UTC offset");
  EXPECT_EQ(why("294247-01-10 04:00:54.775808"), "is outside the range of tally's timestamps");
  EXPECT_EQ(why("5874897-12-31"), "is outside the range of tally's timestamps");
  EXPECT_EQ(why("infinity"), "is infinite; tally's timestamps are finite");
  EXPECT_EQ(why("-infinity"), "is infinite; tally's timestamps are finite");
  EXPECT_EQ(why("0044-03-15 BC"), "is before the common era (BC); it is not supported");
}

TEST(TimestampTest, InstantsSayWhatToWrite) {
  const auto why = [](std::string_view text) {
    const Result<int64_t> micros = ParseInstant(text);
    return micros ? "read as " + FormatTimestamp(*micros) : micros.error().message;
  };
  EXPECT_EQ(why("soon"),
            "\"soon\" is not an instant: write 2024-05-01T00:00:00Z, 20240501T000000Z or Unix "
            "seconds");
  EXPECT_EQ(why("99999999999999999999"),
            "\"99999999999999999999\" is not an instant: write 2024-05-01T00:00:00Z, "
            "20240501T000000Z or Unix seconds");
  EXPECT_EQ(why(std::string(100, 'x')),
            "\"" + std::string(64, 'x') +
                "\" is not an instant: write 2024-05-01T00:00:00Z, 20240501T000000Z or Unix "
                "seconds");
  EXPECT_EQ(why("20240501"),
            "\"20240501\" is ambiguous: 8 digits read as a date (YYYYMMDD) or as Unix seconds "
            "of 1970-1973; write the date as 2024-05-01 or 20240501T000000Z, an instant of "
            "1970-1973 in ISO 8601");
  EXPECT_EQ(why("-9223372036854"), "read as " + FormatTimestamp(-9223372036854 * kMicrosPerSecond));
  EXPECT_EQ(why("-9223372036855"),
            "\"-9223372036855\" is not an instant: write 2024-05-01T00:00:00Z, 20240501T000000Z "
            "or Unix seconds");
}

TEST(TimestampTest, FormatWritesTheKeySpelling) {
  EXPECT_EQ(FormatTimestamp(0), "19700101T000000Z");
  EXPECT_EQ(FormatTimestamp(MicrosFromCivil(2024, 2, 29, 23, 59, 59, 1)),
            "20240229T235959.000001Z");
  EXPECT_EQ(FormatTimestamp(-1), "19691231T235959.999999Z");
  EXPECT_EQ(FormatTimestamp(MicrosFromCivil(0, 1, 1)), "00000101T000000Z");
  EXPECT_EQ(FormatTimestamp(MicrosFromCivil(-44, 3, 15, 12)), "-00440315T120000Z");
  EXPECT_EQ(FormatTimestamp(MicrosFromCivil(12345, 1, 1)), "+123450101T000000Z");
  EXPECT_EQ(FormatTimestamp(std::numeric_limits<int64_t>::max()), "+2942470110T040054.775807Z");
  EXPECT_EQ(FormatTimestamp(std::numeric_limits<int64_t>::min()), "-2903081221T195905.224192Z");
  std::string out = "c:";
  AppendTimestamp(MicrosFromCivil(2024, 5, 1), &out);
  EXPECT_EQ(out, "c:20240501T000000Z");
}

// ParseTimestamp reads back every spelling FormatTimestamp writes, at both ends of int64.
TEST(TimestampTest, TheKeySpellingReadsBack) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> any(MicrosFromCivil(-5000, 1, 1),
                                             MicrosFromCivil(20000, 12, 31));
  for (int i = 0; i < 20000; ++i) {
    const int64_t micros = i % 2 == 0 ? any(rng) : any(rng) / kMicrosPerMinute * kMicrosPerMinute;
    ASSERT_EQ(ParseTimestamp(FormatTimestamp(micros)), micros) << FormatTimestamp(micros);
  }
  for (const int64_t micros :
       {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    EXPECT_EQ(ParseTimestamp(FormatTimestamp(micros)), micros) << FormatTimestamp(micros);
  }
}

// Found by fuzzing (fuzz/key_spelling_fuzz.cc): within a day of INT64_MIN, the time of day
// was computed as micros - days * kMicrosPerDay, whose product leaves int64 (UBSan).
TEST(TimestampTest, TheFirstDayOfInt64ReadsBack) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(FormatTimestamp(kMin + kMicrosPerDay - 1), "-2903081222T195905.224191Z");
  EXPECT_EQ(FormatTimestamp(kMin + 1), "-2903081221T195905.224193Z");
  for (const int64_t micros :
       {kMin, kMin + 1, kMin + kMicrosPerSecond, kMin + kMicrosPerDay - 1, kMin + kMicrosPerDay}) {
    EXPECT_EQ(ParseTimestamp(FormatTimestamp(micros)), micros) << FormatTimestamp(micros);
  }
  EXPECT_FALSE(ParseTimestamp("-2903081221T195905.224191Z"));  // one microsecond below
}

// Random texts of a timestamp's characters, and the table's texts with one byte changed:
// whatever is read reads back from its key spelling, and an instant that is not digits
// alone is what ParseTimestamp reads.
TEST(TimestampTest, WhatIsReadReadsBack) {
  std::mt19937_64 rng(11);
  constexpr std::string_view kAlphabet = "0123456789-:T tZz.+";
  size_t accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string text;
    if (i % 2 == 0) {
      const size_t length = rng() % 30;
      for (size_t j = 0; j < length; ++j) text.push_back(kAlphabet[rng() % kAlphabet.size()]);
    } else {
      const auto& cases = timestamp_cases::kCases;
      text = cases[rng() % std::size(cases)].text;
      if (!text.empty()) text[rng() % text.size()] = kAlphabet[rng() % kAlphabet.size()];
    }
    const Result<int64_t> micros = ParseTimestamp(text);
    if (micros) {
      ++accepted;
      ASSERT_EQ(ParseTimestamp(FormatTimestamp(*micros)), *micros) << text;
    }
    if (text.find_first_not_of("-0123456789") != std::string::npos) {
      const Result<int64_t> instant = ParseInstant(text);
      ASSERT_EQ(instant.has_value(), micros.has_value()) << text;
      if (instant) {
        ASSERT_EQ(*instant, *micros) << text;
      }
    }
  }
  EXPECT_GT(accepted, 1000u);
}

}  // namespace
}  // namespace tally
