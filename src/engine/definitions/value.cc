#include "engine/definitions/value.h"

#include <fmt/format.h>

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

}  // namespace

std::string FormatTimestamp(int64_t micros) {
  std::string out;
  AppendTimestamp(micros, &out);
  return out;
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
