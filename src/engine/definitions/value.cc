#include "engine/definitions/value.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/timestamp.h"
#include "engine/definitions/numeric.h"

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
    case Type::kNumeric:
      return "numeric";
    case Type::kFloat:
      return "float";
  }
  return "?";
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
      // Never a key column (the compiler refuses them); spelled for completeness.
      case Type::kNumeric:
        AppendDecimal(part.i, part.scale, out);
        break;
      case Type::kFloat:
        out->append(fmt::format("{}", part.float_value()));
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
    case Type::kNumeric:
      return FormatDecimal(value.i, value.scale);
    case Type::kFloat:
      return fmt::format("{}", value.float_value());
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
