#include "engine/definitions/value.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/definitions/time_util.h"

namespace tally::definitions {

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kInt64:
      return "int64";
    case Type::kBool:
      return "bool";
    case Type::kText:
      return "text";
    case Type::kTimestamp:
      return "timestamp";
  }
  return "?";
}

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

// FormatTimestamp appending to `out`, without allocating (it is on the key path).
void AppendTimestamp(int64_t micros, std::string* out) {
  const int64_t days = FloorDiv(micros, kMicrosPerDay);
  const int64_t in_day = micros - days * kMicrosPerDay;
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

// Reads exactly `width` decimal digits at text[*at] and advances; nullopt unless there are.
std::optional<int64_t> ReadDigits(std::string_view text, size_t* at, size_t width) {
  if (*at + width > text.size()) return std::nullopt;
  int64_t value = 0;
  for (size_t i = 0; i < width; ++i) {
    const char c = text[*at + i];
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  *at += width;
  return value;
}

}  // namespace

std::string FormatTimestamp(int64_t micros) {
  std::string out;
  AppendTimestamp(micros, &out);
  return out;
}

std::optional<int64_t> ParseTimestamp(std::string_view text) {
  // [sign] year (4 digits, more with a sign) MM DD 'T' HH MM SS [ '.' ffffff ] 'Z'
  const size_t t = text.find('T');
  if (t == std::string_view::npos || t < 8) return std::nullopt;
  size_t at = 0;
  int64_t sign = 1;
  if (text[0] == '+' || text[0] == '-') {
    sign = text[0] == '-' ? -1 : 1;
    at = 1;
  }
  const size_t year_digits = t - 4 - at;
  if (year_digits < 4 || year_digits > 12 || (at == 0 && year_digits != 4)) return std::nullopt;
  const auto year = ReadDigits(text, &at, year_digits);
  const auto month = ReadDigits(text, &at, 2);
  const auto day = ReadDigits(text, &at, 2);
  ++at;  // 'T'
  const auto hour = ReadDigits(text, &at, 2);
  const auto minute = ReadDigits(text, &at, 2);
  const auto second = ReadDigits(text, &at, 2);
  if (!year || !month || !day || !hour || !minute || !second || *month < 1 || *month > 12 ||
      *day < 1 || *hour > 23 || *minute > 59 || *second > 59) {
    return std::nullopt;
  }
  int64_t fraction = 0;
  if (at < text.size() && text[at] == '.') {
    ++at;
    const auto digits = ReadDigits(text, &at, 6);
    if (!digits) return std::nullopt;
    fraction = *digits;
  }
  if (at + 1 != text.size() || text[at] != 'Z') return std::nullopt;
  const int64_t y = sign * *year;
  const int m = static_cast<int>(*month);
  const int64_t days = DaysFromCivil(y, m, static_cast<int>(*day));
  if (CivilFromDays(days).day != *day) return std::nullopt;  // e.g. February 30
  const int64_t in_day = ((*hour * 60 + *minute) * 60 + *second) * kMicrosPerSecond + fraction;
  int64_t micros;
  if (__builtin_mul_overflow(days, kMicrosPerDay, &micros) ||
      __builtin_add_overflow(micros, in_day, &micros)) {
    return std::nullopt;
  }
  return micros;
}

void AppendKey(std::string_view counter_name, std::span<const Value> key, std::string* out) {
  out->append(counter_name);
  char digits[24];
  for (const Value& part : key) {
    out->push_back(':');
    switch (part.type) {
      case Type::kNull:
        out->append("\\N");
        break;
      case Type::kInt64: {
        char* const end = fmt::format_to(digits, "{}", part.i);
        out->append(digits, end);
        break;
      }
      case Type::kBool:
        out->append(part.i != 0 ? "true" : "false");
        break;
      case Type::kTimestamp:
        AppendTimestamp(part.i, out);
        break;
      case Type::kText:
        for (const char c : part.s) {
          if (c == '\\' || c == ':') out->push_back('\\');
          out->push_back(c);
        }
        break;
    }
  }
}

std::string EncodeKey(std::string_view counter_name, std::span<const Value> key) {
  std::string out;
  AppendKey(counter_name, key, &out);
  return out;
}

std::optional<std::string_view> KeyPartText(std::string_view key, size_t index) {
  // A counter name holds no ':' or backslash: the first ':' ends it. In a part, a
  // backslash escapes the next byte.
  size_t at = key.find(':');
  if (at == std::string_view::npos) return std::nullopt;
  for (size_t part = 0;; ++part) {
    const size_t begin = ++at;
    while (at < key.size() && key[at] != ':') at += key[at] == '\\' ? 2 : 1;
    at = std::min(at, key.size());
    if (part == index) return key.substr(begin, at - begin);
    if (at >= key.size()) return std::nullopt;
  }
}

std::string DebugString(const Value& value) {
  switch (value.type) {
    case Type::kNull:
      return "NULL";
    case Type::kInt64:
      return fmt::format("{}", value.i);
    case Type::kBool:
      return value.i != 0 ? "true" : "false";
    case Type::kTimestamp:
      return fmt::format("timestamp '{}'", FormatTimestamp(value.i));
    case Type::kText: {
      std::string out = "'";
      for (const char c : value.s) {
        if (c == '\'') out.push_back('\'');
        out.push_back(c);
      }
      out.push_back('\'');
      return out;
    }
  }
  return "?";
}

}  // namespace tally::definitions
