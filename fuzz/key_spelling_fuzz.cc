// libFuzzer target for the spellings of keys and time: counter keys (EncodeKey, KeyPartText,
// ParseKeyPart), the key's timestamp (FormatTimestamp, ParseTimestamp), date_trunc buckets
// and retentions. The input is read twice: whole, as a text that each reader gets, and as
// structured values (FuzzedDataProvider) for the writers. Properties:
//   - every int64 written as a timestamp (FormatTimestamp) reads back;
//   - a client's key part (ParseKeyPart) reads a timestamp exactly when ParseTimestamp does,
//     as the same instant, and reads a stored key's canonical parts as they are: integers,
//     booleans, timestamps, text, \N;
//   - a key made of any values splits back into them (KeyPartText, then the grammar);
//   - a retention read and written again is the same; a time unit's name is what was read;
//   - date_trunc's bucket holds the instant and is its own bucket; a bucket once expired
//     stays expired.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/integer.h"
#include "core/timestamp.h"
#include "engine/definitions/time_util.h"
#include "engine/definitions/value.h"
#include "engine/derived/key_part.h"
#include "fuzz_check.h"
#include "key_parts.h"

namespace tally::definitions {
namespace {

using fuzz::Check;

bool Equal(const Result<Value>& result, const Value& value) {
  return result.has_value() && fuzz::SameValue(*result, value);
}

void CheckTimestampText(std::string_view text) {
  if (text == "\\N") return;  // NULL, for every type
  const Result<int64_t> micros = ParseTimestamp(text);
  std::string storage;
  const Result<Value> part = derived::ParseKeyPart(Type::kTimestamp, text, &storage);
  Check(part.has_value() == micros.has_value(),
        "a client's key part reads a timestamp exactly when ParseTimestamp does", text);
  if (micros) Check(Equal(part, Value::Timestamp(*micros)), "as the same instant", text);
}

void CheckText(std::string_view text) {
  CheckTimestampText(text);
  std::string storage;
  if (const std::optional<int64_t> v = ParseInt64(text)) {
    Check(Equal(derived::ParseKeyPart(Type::kInt64, text, &storage), Value::Int(*v)),
          "a client's key part reads a canonical integer", text);
  }
  // A client's key part is refused only with a message naming what was sent.
  for (const Type type : {Type::kInt64, Type::kBool, Type::kTimestamp, Type::kText}) {
    auto part = derived::ParseKeyPart(type, text, &storage);
    if (!part) {
      // `"abc" is not an int64`, or `':' at byte 2 must be written \: (...)`.
      const char first = part.error().message.empty() ? '\0' : part.error().message[0];
      Check(part.error().code == ErrorCode::kInvalidArgument && (first == '"' || first == '\''),
            "a refused key part is named in its error", part.error().message);
    }
  }
  if (auto retention = ParseRetention(text)) {
    Check(retention->count >= 1 && retention->count <= kMaxRetentionCount,
          "a retention is within its range", text);
    auto again = ParseRetention(RetentionText(*retention));
    Check(again && *again == *retention, "a retention reads back from its text", text);
  }
  for (const bool plural : {false, true}) {
    if (const std::optional<TimeUnit> unit = ParseTimeUnit(text, plural)) {
      std::string lower(text);
      for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
      const std::string_view name = TimeUnitName(*unit);
      Check(lower == name || (plural && lower == std::string(name) + "s"),
            "a time unit is what was named", text);
    }
  }
}

void CheckTime(FuzzedDataProvider& in) {
  const int64_t micros = in.ConsumeIntegral<int64_t>();
  const std::string text = FormatTimestamp(micros);
  Check(ParseTimestamp(text) == micros, "every timestamp reads back", text);
  const auto unit = static_cast<TimeUnit>(in.ConsumeIntegralInRange<int>(0, 4));
  if (const std::optional<int64_t> start = TruncateTimestamp(unit, micros)) {
    Check(*start <= micros, "a bucket starts at or before its instant", text);
    Check(TruncateTimestamp(unit, *start) == start, "a bucket start is its own bucket", text);
    if (const std::optional<int64_t> end = BucketEnd(unit, *start)) {
      Check(*end > micros, "a bucket ends after its instant", text);
    }
    const Retention retention{in.ConsumeIntegralInRange<int64_t>(1, kMaxRetentionCount),
                              static_cast<TimeUnit>(in.ConsumeIntegralInRange<int>(0, 4))};
    const int64_t now = in.ConsumeIntegral<int64_t>();
    const int64_t later = in.ConsumeIntegralInRange<int64_t>(now, INT64_MAX);
    if (BucketExpired(unit, *start, retention, now)) {
      Check(BucketExpired(unit, *start, retention, later), "an expired bucket stays expired", text);
    }
  }
}

// A key of 0 to 8 parts of any types and values.
void CheckKey(FuzzedDataProvider& in) {
  std::string name = in.ConsumeRandomLengthString(16);
  for (char& c : name) {
    if (c == ':' || c == '\\') c = '_';  // a counter's name holds neither
  }
  std::vector<Value> values;
  std::vector<Type> types;
  std::vector<std::string> texts;  // owns the text values' bytes
  texts.reserve(8);
  const size_t parts = in.ConsumeIntegralInRange<size_t>(0, 8);
  for (size_t i = 0; i < parts; ++i) {
    const auto type = static_cast<Type>(in.ConsumeIntegralInRange<int>(1, 4));
    types.push_back(type);
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
      values.push_back(Value::Null());
      continue;
    }
    switch (type) {
      case Type::kInt64:
        values.push_back(Value::Int(in.ConsumeIntegral<int64_t>()));
        break;
      case Type::kBool:
        values.push_back(Value::Bool(in.ConsumeBool()));
        break;
      case Type::kTimestamp:
        values.push_back(Value::Timestamp(in.ConsumeIntegral<int64_t>()));
        break;
      default:
        texts.push_back(in.ConsumeRandomLengthString(24));
        values.push_back(Value::Text(texts.back()));
        break;
    }
  }
  const std::string key = EncodeKey(name, values);
  fuzz::CheckKeyReadsBack(key, name, values, types);
  // What a client sends as a part (a path segment, an argument) is spelled as in the key, so
  // each part of the key reads back as its value, NULL and the text "\N" included.
  std::string storage;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string_view part = *KeyPartText(key, i);
    Check(Equal(derived::ParseKeyPart(types[i], part, &storage), values[i]),
          "a client's key part, spelled as in the key, reads as the value", part);
  }
}

}  // namespace
}  // namespace tally::definitions

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tally::definitions::CheckText(std::string_view(reinterpret_cast<const char*>(data), size));
  FuzzedDataProvider in(data, size);
  tally::definitions::CheckTime(in);
  tally::definitions::CheckKey(in);
  return 0;
}
