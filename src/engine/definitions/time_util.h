// Calendar arithmetic on int64 microseconds since the Unix epoch, UTC, in the proleptic
// Gregorian calendar (as PostgreSQL's timestamp). Days to dates use Howard Hinnant's
// public-domain algorithms, exact over the whole int64 range of days.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tally::definitions {

inline constexpr int64_t kMicrosPerSecond = 1'000'000;
inline constexpr int64_t kMicrosPerMinute = 60 * kMicrosPerSecond;
inline constexpr int64_t kMicrosPerHour = 60 * kMicrosPerMinute;
inline constexpr int64_t kMicrosPerDay = 24 * kMicrosPerHour;

// a / b rounded toward negative infinity. REQUIRES: b > 0.
inline constexpr int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// A date of the proleptic Gregorian calendar.
struct CivilDate {
  int64_t year;
  int month;  // 1..12
  int day;    // 1..31
};

// The date `days` after 1970-01-01.
inline constexpr CivilDate CivilFromDays(int64_t days) {
  days += 719468;
  const int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const int64_t doe = days - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  return CivilDate{yoe + era * 400 + (month <= 2 ? 1 : 0), month, day};
}

// The number of days from 1970-01-01 to `date`.
inline constexpr int64_t DaysFromCivil(int64_t year, int month, int day) {
  year -= month <= 2 ? 1 : 0;
  const int64_t era = (year >= 0 ? year : year - 399) / 400;
  const int64_t yoe = year - era * 400;
  const int64_t doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// The units of date_trunc.
enum class TimeUnit : uint8_t { kMinute, kHour, kDay, kWeek, kMonth };

// date_trunc(unit, micros) as PostgreSQL computes it for a timestamp: the start of the
// minute, hour, day, ISO week (Monday) or month holding `micros`. nullopt when the start
// lies before the int64 range.
std::optional<int64_t> TruncateTimestamp(TimeUnit unit, int64_t micros);

// The unit named `name` ("minute", "hour", "day", "week", "month"; ASCII case ignored),
// and with `plural` also its plural ("minutes", ...). nullopt for any other word.
std::optional<TimeUnit> ParseTimeUnit(std::string_view name, bool plural = false);
// "minute", "hour", ... as date_trunc spells the unit.
std::string_view TimeUnitName(TimeUnit unit);

// The end of the date_trunc(unit) bucket that starts at `start` (a value TruncateTimestamp
// gives): start plus a minute, hour, day or week, or the first instant of the next calendar
// month. nullopt past the int64 range.
std::optional<int64_t> BucketEnd(TimeUnit unit, int64_t start);

// How long a counter keeps its time buckets: `count` units, a month being a calendar
// month. The retention of CREATE COUNTER ... WITH (retention = '30 days').
struct Retention {
  int64_t count = 0;  // 1..kMaxRetentionCount
  TimeUnit unit = TimeUnit::kDay;

  bool operator==(const Retention&) const = default;
};
inline constexpr int64_t kMaxRetentionCount = 1'000'000;

// Parses a retention as written in WITH (retention = '...'): a whole number from 1 to
// kMaxRetentionCount and one unit, singular or plural, case-insensitive, blanks around
// either: '30 days', '1 month', '12 Hours'. kInvalidArgument with the reason otherwise.
Result<Retention> ParseRetention(std::string_view text);
// The normalised spelling: "30 days", "1 month".
std::string RetentionText(Retention retention);

// now - retention, as PostgreSQL computes `timestamp - interval`: minutes, hours, days and
// weeks as fixed lengths; months on the calendar, the day of the month kept and clamped to
// the month's last (2024-03-31 - 1 month = 2024-02-29). nullopt below the int64 range
// (nothing is old enough to have expired).
std::optional<int64_t> RetentionCutoff(Retention retention, int64_t now_micros);

// The retention rule: the bucket of `unit` starting at `start` has expired at `now_micros`
// once all of it is older than the retention, i.e. once its end is at or before
// now - retention: BucketEnd(unit, start) <= RetentionCutoff(retention, now). It is kept
// while any instant of it is within the retention. Monotonic: once expired, always expired
// at later instants.
bool BucketExpired(TimeUnit unit, int64_t start, Retention retention, int64_t now_micros);

}  // namespace tally::definitions
