// The canonical counter key read back, for the fuzzers of definitions and keys: a second
// reading of value.h's key grammar, written from the grammar rather than from EncodeKey, so
// that a key that does not split back into the values it was made of is found.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/integer.h"
#include "core/timestamp.h"
#include "engine/definitions/value.h"
#include "fuzz_check.h"

namespace tally::fuzz {

// The value of `type` that `part` spells, escapes included ("a\:b" is the text "a:b"), or
// nullopt when it is not the canonical spelling of one. Text bytes are written to `*text`,
// which the returned value views.
inline std::optional<definitions::Value> DecodeKeyPart(definitions::Type type,
                                                       std::string_view part, std::string* text) {
  using definitions::Type;
  using definitions::Value;
  if (part == "\\N") return Value::Null();
  switch (type) {
    case Type::kInt64:
      if (auto v = ParseInt64(part)) return Value::Int(*v);
      return std::nullopt;
    case Type::kBool:
      if (part == "true" || part == "false") return Value::Bool(part == "true");
      return std::nullopt;
    case Type::kTimestamp:
      // ParseTimestamp reads other spellings too; a key holds FormatTimestamp's only.
      if (auto micros = ParseTimestamp(part); micros && FormatTimestamp(*micros) == part) {
        return Value::Timestamp(*micros);
      }
      return std::nullopt;
    case Type::kText:
      text->clear();
      for (size_t i = 0; i < part.size(); ++i) {
        if (part[i] == '\\') {
          // Only '\' and ':' are escaped; a lone or other escape is not canonical.
          if (i + 1 == part.size() || (part[i + 1] != '\\' && part[i + 1] != ':')) {
            return std::nullopt;
          }
          ++i;
        } else if (part[i] == ':') {
          return std::nullopt;
        }
        text->push_back(part[i]);
      }
      return Value::Text(*text);
    case Type::kNumeric:  // never a key column
    case Type::kFloat:
    case Type::kNull:
      break;
  }
  return std::nullopt;
}

inline bool SameValue(const definitions::Value& a, const definitions::Value& b) {
  if (a.type != b.type) return false;
  return a.type == definitions::Type::kText ? a.s == b.s : a.i == b.i;
}

// Checks that `key`, made by EncodeKey(name, values), reads back: its counter name, then
// one part per value, each decoding to that value given the value's column type.
inline void CheckKeyReadsBack(std::string_view key, std::string_view name,
                              std::span<const definitions::Value> values,
                              std::span<const definitions::Type> types) {
  Check(key.substr(0, name.size()) == name, "a key starts with its counter's name", key);
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::optional<std::string_view> part = definitions::KeyPartText(key, i);
    Check(part.has_value(), "a key has a part per key column", key);
    const auto decoded = DecodeKeyPart(types[i], *part, &text);
    Check(decoded.has_value(), "a key part is the canonical spelling of a value", *part);
    Check(SameValue(*decoded, values[i]), "a key part reads back as its value", *part);
  }
  Check(!definitions::KeyPartText(key, values.size()).has_value(),
        "a key has no part beyond its key columns", key);
}

}  // namespace tally::fuzz
