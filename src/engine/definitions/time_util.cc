#include "engine/definitions/time_util.h"

namespace tally::definitions {
namespace {

// The start of the `unit`-long bucket holding `micros`, buckets aligned on the epoch.
std::optional<int64_t> FloorTo(int64_t micros, int64_t unit) {
  const int64_t buckets = FloorDiv(micros, unit);
  int64_t start;
  if (__builtin_mul_overflow(buckets, unit, &start)) return std::nullopt;
  return start;
}

}  // namespace

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
