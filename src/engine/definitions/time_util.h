// The SQL functions of time in counter definitions: date_trunc's buckets and the retention
// of time-bucketed counters, on int64 microseconds since the Unix epoch, UTC, with the
// calendar of core/calendar.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/calendar.h"
#include "core/status.h"

namespace tally::definitions {

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
