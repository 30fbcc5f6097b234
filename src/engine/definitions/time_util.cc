#include "engine/definitions/time_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace tally::definitions {
namespace {

// The start of the `unit`-long bucket holding `micros`, buckets aligned on the epoch.
std::optional<int64_t> FloorTo(int64_t micros, int64_t unit) {
  const int64_t buckets = FloorDiv(micros, unit);
  int64_t start;
  if (__builtin_mul_overflow(buckets, unit, &start)) return std::nullopt;
  return start;
}

// `micros` moved by `months` calendar months (negative: back), the day of the month clamped
// to the target month's last, the time of day kept: PostgreSQL's timestamp +/- interval
// 'N months'. nullopt past the int64 range.
std::optional<int64_t> AddMonths(int64_t micros, int64_t months) {
  const int64_t days = FloorDiv(micros, kMicrosPerDay);
  const int64_t time_of_day = FloorMod(micros, kMicrosPerDay);
  const CivilDate date = CivilFromDays(days);
  // Months since year 0, then back to a year and month; |months| is bounded by the
  // retention's limit, so this cannot overflow.
  const int64_t index = date.year * 12 + (date.month - 1) + months;
  const int64_t year = FloorDiv(index, 12);
  const int month = static_cast<int>(index - year * 12) + 1;
  const int day = static_cast<int>(std::min<int64_t>(date.day, DaysInMonth(year, month)));
  int64_t out;
  if (__builtin_mul_overflow(DaysFromCivil(year, month, day), kMicrosPerDay, &out) ||
      __builtin_add_overflow(out, time_of_day, &out)) {
    return std::nullopt;
  }
  return out;
}

// The fixed length of a unit other than a month.
int64_t FixedLength(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kMinute:
      return kMicrosPerMinute;
    case TimeUnit::kHour:
      return kMicrosPerHour;
    case TimeUnit::kDay:
      return kMicrosPerDay;
    case TimeUnit::kWeek:
    case TimeUnit::kMonth:
      break;
  }
  return 7 * kMicrosPerDay;
}

constexpr std::array<std::string_view, 5> kUnitNames = {"minute", "hour", "day", "week", "month"};

bool EqualsIgnoreAsciiCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (c != b[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<TimeUnit> ParseTimeUnit(std::string_view name, bool plural) {
  for (size_t i = 0; i < kUnitNames.size(); ++i) {
    const std::string_view unit = kUnitNames[i];
    if (EqualsIgnoreAsciiCase(name, unit) ||
        (plural && name.size() == unit.size() + 1 && (name.back() == 's' || name.back() == 'S') &&
         EqualsIgnoreAsciiCase(name.substr(0, unit.size()), unit))) {
      return static_cast<TimeUnit>(i);
    }
  }
  return std::nullopt;
}

std::string_view TimeUnitName(TimeUnit unit) { return kUnitNames[static_cast<size_t>(unit)]; }

std::optional<int64_t> BucketEnd(TimeUnit unit, int64_t start) {
  if (unit == TimeUnit::kMonth) return AddMonths(start, 1);
  int64_t end;
  if (__builtin_add_overflow(start, FixedLength(unit), &end)) return std::nullopt;
  return end;
}

Result<Retention> ParseRetention(std::string_view text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t at = 0;
  while (at < text.size() && blank(text[at])) ++at;
  const size_t digits_start = at;
  int64_t count = 0;
  bool too_large = false;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
    count = count * 10 + (text[at] - '0');
    if (count > kMaxRetentionCount) {
      too_large = true;
      count = kMaxRetentionCount + 1;
    }
    ++at;
  }
  const bool has_number = at > digits_start;
  while (at < text.size() && blank(text[at])) ++at;
  size_t end = text.size();
  while (end > at && blank(text[end - 1])) --end;
  const std::optional<TimeUnit> unit = ParseTimeUnit(text.substr(at, end - at), /*plural=*/true);
  if (!has_number || !unit) {
    return InvalidArgument(fmt::format(
        "retention '{}' is not supported: write a whole number and one unit, such as '30 days' "
        "(units: minute, hour, day, week, month, or their plurals)",
        text));
  }
  if (count < 1 || too_large) {
    return InvalidArgument(fmt::format("retention '{}' is out of range: from 1 to {} {}s", text,
                                       kMaxRetentionCount, TimeUnitName(*unit)));
  }
  return Retention{count, *unit};
}

std::string RetentionText(Retention retention) {
  return fmt::format("{} {}{}", retention.count, TimeUnitName(retention.unit),
                     retention.count == 1 ? "" : "s");
}

std::optional<int64_t> RetentionCutoff(Retention retention, int64_t now_micros) {
  if (retention.unit == TimeUnit::kMonth) return AddMonths(now_micros, -retention.count);
  // count <= kMaxRetentionCount, so count * one week fits an int64.
  int64_t cutoff;
  if (__builtin_sub_overflow(now_micros, retention.count * FixedLength(retention.unit), &cutoff)) {
    return std::nullopt;
  }
  return cutoff;
}

bool BucketExpired(TimeUnit unit, int64_t start, Retention retention, int64_t now_micros) {
  const std::optional<int64_t> end = BucketEnd(unit, start);
  const std::optional<int64_t> cutoff = RetentionCutoff(retention, now_micros);
  return end && cutoff && *end <= *cutoff;
}

std::optional<int64_t> TruncateTimestamp(TimeUnit unit, int64_t micros) {
  switch (unit) {
    case TimeUnit::kMinute:
      return FloorTo(micros, kMicrosPerMinute);
    case TimeUnit::kHour:
      return FloorTo(micros, kMicrosPerHour);
    case TimeUnit::kDay:
      return FloorTo(micros, kMicrosPerDay);
    case TimeUnit::kWeek: {
      // 1970-01-01 was a Thursday: day d is (d + 3) mod 7 days after a Monday.
      const int64_t days = FloorDiv(micros, kMicrosPerDay);
      const int64_t since_monday = days - FloorDiv(days + 3, 7) * 7 + 3;
      int64_t start;
      if (__builtin_mul_overflow(days - since_monday, kMicrosPerDay, &start)) {
        return std::nullopt;
      }
      return start;
    }
    case TimeUnit::kMonth: {
      const CivilDate date = CivilFromDays(FloorDiv(micros, kMicrosPerDay));
      int64_t start;
      if (__builtin_mul_overflow(DaysFromCivil(date.year, date.month, 1), kMicrosPerDay, &start)) {
        return std::nullopt;
      }
      return start;
    }
  }
  return std::nullopt;
}

}  // namespace tally::definitions
