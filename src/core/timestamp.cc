#include "core/timestamp.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/calendar.h"

namespace tally {
namespace {

// Appends `value` as exactly `width` decimal digits. REQUIRES: 0 <= value < 10^width.
void AppendDigits(int64_t value, int width, std::string* out) {
  char digits[20];
  for (int i = width - 1; i >= 0; --i) {
    digits[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
  out->append(digits, static_cast<size_t>(width));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The fields of a timestamp as written, before their range checks.
struct Fields {
  int64_t year = 0;
  int64_t month = 0;
  int64_t day = 0;
  int64_t hour = 0;
  int64_t minute = 0;
  int64_t second = 0;
  int64_t micros = 0;          // the fraction of the second, rounded to microseconds
  int64_t offset_seconds = 0;  // east of UTC
};

// A cursor over the text of a timestamp.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}

  bool done() const { return at_ == text_.size(); }
  std::string_view rest() const { return text_.substr(at_); }
  // The number of digits from the cursor on.
  size_t DigitRun() const {
    size_t end = at_;
    while (end < text_.size() && IsDigit(text_[end])) ++end;
    return end - at_;
  }
  // Consumes `c` or `alternative` when the cursor is at either.
  bool Eat(char c, char alternative = '\0') {
    if (at_ < text_.size() &&
        (text_[at_] == c || (alternative != '\0' && text_[at_] == alternative))) {
      ++at_;
      return true;
    }
    return false;
  }
  // Consumes exactly `count` digits into *out; false (consuming nothing) unless there are.
  bool Digits(size_t count, int64_t* out) {
    if (DigitRun() < count) return false;
    int64_t value = 0;
    for (size_t i = 0; i < count; ++i) value = value * 10 + (text_[at_ + i] - '0');
    at_ += count;
    *out = value;
    return true;
  }
  // Consumes the digits of a fraction of a second (after its '.'): 1 to 18 of them, more
  // than 6 rounded to the microsecond as PostgreSQL rounds them (rint of the fraction, as
  // a double, times 10^6). *micros may come out as 1'000'000.
  bool Fraction(int64_t* micros) {
    const size_t digits = DigitRun();
    if (digits == 0 || digits > 18) return false;
    if (digits <= 6) {
      Digits(digits, micros);
      for (size_t i = digits; i < 6; ++i) *micros *= 10;
      return true;
    }
    char buffer[24] = "0.";
    std::memcpy(buffer + 2, text_.data() + at_, digits);
    double fraction = 0;
    std::from_chars(buffer, buffer + 2 + digits, fraction);
    *micros = static_cast<int64_t>(std::rint(fraction * 1e6));
    at_ += digits;
    return true;
  }

 private:
  std::string_view text_;
  size_t at_ = 0;
};

constexpr std::string_view kNotIso =
    "is not in ISO 8601 format (2024-05-01, 2024-05-01T13:45:07.123456+02:00 or "
    "20240501T134507Z)";

Status NotIso() { return InvalidArgument(std::string(kNotIso)); }

Status Unexpected(const Cursor& in) {
  return InvalidArgument(fmt::format("has unexpected text '{}'", in.rest()));
}

// An offset after its sign: hh, hhmm, hh:mm or hh:mm:ss, into *seconds (unsigned).
bool ReadOffset(Cursor& in, int64_t* seconds) {
  int64_t hours = 0;
  int64_t minutes = 0;
  int64_t secs = 0;
  if (!in.Digits(2, &hours)) return false;
  if (in.Eat(':')) {
    if (!in.Digits(2, &minutes)) return false;
    if (in.Eat(':') && !in.Digits(2, &secs)) return false;
  } else if (in.DigitRun() > 0 && !in.Digits(2, &minutes)) {
    return false;
  }
  if (hours > 15 || minutes > 59 || secs > 59) return false;
  *seconds = (hours * 60 + minutes) * 60 + secs;
  return true;
}

// The extended spelling from its first year digit: YYYY-MM-DD, then an optional time and
// offset. `year_digits` is the length of the digit run the text starts with.
Status ReadExtended(Cursor& in, size_t year_digits, Fields* f) {
  if (year_digits < 4 || year_digits > 7 || !in.Digits(year_digits, &f->year) || !in.Eat('-') ||
      !in.Digits(2, &f->month) || !in.Eat('-') || !in.Digits(2, &f->day)) {
    return NotIso();
  }
  // There is no year 0 in AD/BC years (PostgreSQL refuses "0000-01-01").
  if (f->year == 0) return InvalidArgument("is not a valid date");
  if (in.done()) return OkStatus();
  if (!in.Eat('T', 't') && !in.Eat(' ')) return Unexpected(in);
  if (!in.Digits(2, &f->hour) || !in.Eat(':') || !in.Digits(2, &f->minute)) return NotIso();
  if (in.Eat(':')) {
    if (!in.Digits(2, &f->second)) return NotIso();
    if (in.Eat('.') && !in.Fraction(&f->micros)) return NotIso();
  }
  if (in.Eat('Z', 'z')) return in.done() ? OkStatus() : Unexpected(in);
  const bool west = in.Eat('-');
  if (west || in.Eat('+')) {
    if (!ReadOffset(in, &f->offset_seconds)) {
      return InvalidArgument("has an invalid UTC offset");
    }
    if (west) f->offset_seconds = -f->offset_seconds;
  }
  return in.done() ? OkStatus() : Unexpected(in);
}

// The basic spelling after its sign (`sign` is 0 without one): YYYYMMDD 'T' hhmmss
// [.fraction] 'Z'. `digits` is the length of the digit run before the 'T'.
Status ReadBasic(Cursor& in, int sign, size_t digits, Fields* f) {
  const size_t year_digits = digits - 4;
  if (sign == 0 ? year_digits != 4 : (year_digits < 4 || year_digits > 7)) return NotIso();
  in.Digits(year_digits, &f->year);
  if (sign < 0) f->year = -f->year;
  in.Digits(2, &f->month);
  in.Digits(2, &f->day);
  in.Eat('T', 't');
  if (!in.Digits(2, &f->hour) || !in.Digits(2, &f->minute) || !in.Digits(2, &f->second)) {
    return NotIso();
  }
  if (in.Eat('.') && !in.Fraction(&f->micros)) return NotIso();
  if (!in.Eat('Z', 'z')) return in.done() ? NotIso() : Unexpected(in);
  return in.done() ? OkStatus() : Unexpected(in);
}

// The instant of `f`, after PostgreSQL's range checks of each field.
Result<int64_t> ToMicros(const Fields& f) {
  if (f.month < 1 || f.month > 12 || f.day < 1 ||
      f.day > DaysInMonth(f.year, static_cast<int>(f.month))) {
    return InvalidArgument("is not a valid date");
  }
  if (f.hour > 24 || f.minute > 59 || f.second > 60 ||
      (f.hour == 24 && (f.minute != 0 || f.second != 0 || f.micros != 0)) ||
      (f.second == 60 && f.micros != 0)) {
    return InvalidArgument("has an invalid time of day");
  }
  const int64_t days = DaysFromCivil(f.year, static_cast<int>(f.month), static_cast<int>(f.day));
  const int64_t seconds = (f.hour * 60 + f.minute) * 60 + f.second - f.offset_seconds;
  // In 128 bits: the day's start alone may lie below the int64 range when the instant
  // does not (the first day of the range).
  const __int128 micros =
      static_cast<__int128>(days) * kMicrosPerDay + seconds * kMicrosPerSecond + f.micros;
  if (micros < std::numeric_limits<int64_t>::min() ||
      micros > std::numeric_limits<int64_t>::max()) {
    return InvalidArgument("is outside the range of tally's timestamps");
  }
  return static_cast<int64_t>(micros);
}

}  // namespace

void AppendTimestamp(int64_t micros, std::string* out) {
  const int64_t days = FloorDiv(micros, kMicrosPerDay);
  const int64_t in_day = FloorMod(micros, kMicrosPerDay);
  const CivilDate date = CivilFromDays(days);
  const int64_t seconds = in_day / kMicrosPerSecond;
  const int64_t fraction = in_day % kMicrosPerSecond;
  if (date.year >= 0 && date.year <= 9999) {
    AppendDigits(date.year, 4, out);
  } else {
    out->append(fmt::format("{:+05}", date.year));
  }
  AppendDigits(date.month, 2, out);
  AppendDigits(date.day, 2, out);
  out->push_back('T');
  AppendDigits(seconds / 3600, 2, out);
  AppendDigits(seconds / 60 % 60, 2, out);
  AppendDigits(seconds % 60, 2, out);
  if (fraction != 0) {
    out->push_back('.');
    AppendDigits(fraction, 6, out);
  }
  out->push_back('Z');
}

std::string FormatTimestamp(int64_t micros) {
  std::string out;
  AppendTimestamp(micros, &out);
  return out;
}

Result<int64_t> ParseTimestamp(std::string_view text) {
  if (text == "infinity" || text == "-infinity") {
    return InvalidArgument("is infinite; tally's timestamps are finite");
  }
  if (text.ends_with(" BC")) {
    return InvalidArgument("is before the common era (BC); it is not supported");
  }
  Cursor in(text);
  int sign = 0;
  if (in.Eat('+')) {
    sign = 1;
  } else if (in.Eat('-')) {
    sign = -1;
  }
  // The first separator after the leading digits tells the spelling.
  const size_t digits = in.DigitRun();
  const char after = digits < in.rest().size() ? in.rest()[digits] : '\0';
  Fields fields;
  Status read;
  if (after == '-' && sign == 0) {
    read = ReadExtended(in, digits, &fields);
  } else if ((after == 'T' || after == 't') && digits >= 8) {
    read = ReadBasic(in, sign, digits, &fields);
  } else {
    read = NotIso();
  }
  if (!read) return tl::unexpected(read.error());
  return ToMicros(fields);
}

Result<int64_t> ParseInstant(std::string_view text) {
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  if (!digits.empty() && std::ranges::all_of(digits, IsDigit)) {
    if (text.size() == 8) {
      return InvalidArgument(fmt::format(
          "\"{}\" is ambiguous: 8 digits read as a date (YYYYMMDD) or as Unix seconds of "
          "1970-1973; write the date as {}-{}-{} or {}T000000Z, an instant of 1970-1973 in "
          "ISO 8601",
          text, text.substr(0, 4), text.substr(4, 2), text.substr(6, 2), text));
    }
    int64_t seconds = 0;
    int64_t micros = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seconds);
    if (error == std::errc() && end == text.data() + text.size() &&
        !__builtin_mul_overflow(seconds, kMicrosPerSecond, &micros)) {
      return micros;
    }
  } else if (auto micros = ParseTimestamp(text)) {
    return *micros;
  }
  return InvalidArgument(fmt::format(
      "\"{}\" is not an instant: write 2024-05-01T00:00:00Z, 20240501T000000Z or Unix seconds",
      text.substr(0, 64)));
}

}  // namespace tally
