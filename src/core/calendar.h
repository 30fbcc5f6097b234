// Calendar arithmetic on int64 microseconds since the Unix epoch, UTC, in the proleptic
// Gregorian calendar (as PostgreSQL's timestamp), with astronomical years (year 0 is 1 BC).
// Days to dates use Howard Hinnant's public-domain algorithms, exact over the whole int64
// range of days. The one calendar of tally: the timestamp spellings (core/timestamp.h),
// date_trunc and retention (engine/definitions/time_util.h) all count days with it.
#pragma once

#include <cstdint>

namespace tally {

inline constexpr int64_t kMicrosPerSecond = 1'000'000;
inline constexpr int64_t kMicrosPerMinute = 60 * kMicrosPerSecond;
inline constexpr int64_t kMicrosPerHour = 60 * kMicrosPerMinute;
inline constexpr int64_t kMicrosPerDay = 24 * kMicrosPerHour;

// a / b rounded toward negative infinity. REQUIRES: b > 0.
inline constexpr int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// a - FloorDiv(a, b) * b, in [0, b), computed without leaving int64 (the product does, within
// b of INT64_MIN). REQUIRES: b > 0.
inline constexpr int64_t FloorMod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return r < 0 ? r + b : r;
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

// The number of days from 1970-01-01 to `date`. REQUIRES: 1 <= month <= 12; a day past
// the month's last counts on into the next month.
inline constexpr int64_t DaysFromCivil(int64_t year, int month, int day) {
  year -= month <= 2 ? 1 : 0;
  const int64_t era = (year >= 0 ? year : year - 399) / 400;
  const int64_t yoe = year - era * 400;
  const int64_t doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// The instant of a UTC date and time of day. REQUIRES: a valid date and time whose instant
// lies within int64 (nothing is checked).
inline constexpr int64_t MicrosFromCivil(int64_t year, int month, int day, int64_t hour = 0,
                                         int64_t minute = 0, int64_t second = 0,
                                         int64_t micros = 0) {
  return DaysFromCivil(year, month, day) * kMicrosPerDay + hour * kMicrosPerHour +
         minute * kMicrosPerMinute + second * kMicrosPerSecond + micros;
}

// Whether `year` has a February 29th.
inline constexpr bool IsLeapYear(int64_t year) {
  return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
}

// The days of `month` (1..12) of `year`.
inline constexpr int DaysInMonth(int64_t year, int month) {
  constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && IsLeapYear(year) ? 29 : kDays[month - 1];
}

}  // namespace tally
