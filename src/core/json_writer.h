// JSON output: a string escaper and a small streaming writer (the HTTP API's answers, the
// rows a cluster's source consumer puts in the change stream).
//
// Keys and SQL text may hold any bytes. Valid UTF-8 passes through unchanged; `"`, `\`
// and the control characters U+0000..U+001F are escaped; a byte that is not part of a
// well-formed UTF-8 sequence (core/utf8.h) is written as \u00XX, its Latin-1 reading.
// The output is therefore always valid JSON, and identical to the input whenever the
// input is valid UTF-8 without characters that need escaping.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tally {

// Appends `text` as a JSON string literal, quotes included.
void AppendJsonString(std::string_view text, std::string* out);

// Writes one JSON value into a string. Commas and colons are placed by the writer; the
// caller keeps Begin/End balanced and calls Key() before each member of an object.
class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view name);
  JsonWriter& String(std::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& UInt(uint64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // A finite number in the shortest form that reads back the same ("12.5", "3"); JSON has
  // no NaN or infinity: those are written as null.
  JsonWriter& Double(double value);

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void BeforeValue();

  std::string out_;
  bool need_comma_ = false;  // a value was written at this level: the next one needs ','
};

// {"error":"<message>"}
std::string ErrorJson(std::string_view message);

}  // namespace tally
