// Values of the SQL subset of counter definitions: the cells of a source row, the
// intermediate results of the evaluator and the parts of a group key.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tally::definitions {

// The static type of an expression or a column. kNull is the type of a bare NULL literal
// (PostgreSQL's "unknown"); it is compatible with every other type.
enum class Type : uint8_t {
  kNull,
  kInt64,      // PostgreSQL bigint
  kBool,       // PostgreSQL boolean
  kText,       // PostgreSQL text, UTF-8 bytes, compared bytewise (COLLATE "C")
  kTimestamp,  // PostgreSQL timestamp (UTC), int64 microseconds since the Unix epoch
  kNumeric,    // PostgreSQL numeric(p,s): an int64 count of units of 10^-scale (numeric.h)
  kFloat,      // PostgreSQL real / double precision: inexact, so only counted, never summed
};

// "int64", "bool", "text", "timestamp", "numeric", "float" or "null".
std::string_view TypeName(Type type);

// One cell: a NULL or a value of one type. Trivially copyable (32 bytes); text is a view
// whose bytes are owned by the row or by the evaluator's scratch arena.
struct Value {
  Type type = Type::kNull;  // kNull: the SQL NULL, whatever the column's type
  int8_t scale = 0;         // kNumeric: digits after the point, 0..18
  int64_t i = 0;            // kInt64, kTimestamp; kBool as 0 or 1; kNumeric's units; kFloat's bits
  std::string_view s;       // kText

  bool is_null() const { return type == Type::kNull; }

  static Value Null() { return Value{}; }
  static Value Int(int64_t v) { return Value{Type::kInt64, 0, v, {}}; }
  static Value Bool(bool v) { return Value{Type::kBool, 0, v ? 1 : 0, {}}; }
  static Value Text(std::string_view v) { return Value{Type::kText, 0, 0, v}; }
  static Value Timestamp(int64_t micros) { return Value{Type::kTimestamp, 0, micros, {}}; }
  static Value Numeric(int64_t units, int scale) {
    return Value{Type::kNumeric, static_cast<int8_t>(scale), units, {}};
  }
  static Value Float(double v) { return Value{Type::kFloat, 0, std::bit_cast<int64_t>(v), {}}; }
  double float_value() const { return std::bit_cast<double>(i); }
};

// A source row: one Value per column of the source's schema, in schema order.
using RowView = std::span<const Value>;

// The canonical counter key of one group, which is also its human spelling:
//
//   key      := counter_name ( ':' part )*
//   part     := int64 in decimal ("-12")
//             | "true" | "false"
//             | timestamp as FormatTimestamp writes it ("20240501T000000Z", core/timestamp.h)
//             | text with '\' written "\\" and ':' written "\:"
//             | "\N" for NULL (PostgreSQL's COPY spelling; a text "\N" is written "\\N")
//
// Example: blog_posts:7:3. Given the definition (which fixes each part's type) the
// encoding is injective, so two groups never share a key. Appends to `out`.
void AppendKey(std::string_view counter_name, std::span<const Value> key, std::string* out);
std::string EncodeKey(std::string_view counter_name, std::span<const Value> key);

// The spelling of part `index` (from 0) of a canonical key, escapes kept ("\\:" stays two
// bytes); nullopt when the key has no such part.
std::optional<std::string_view> KeyPartText(std::string_view key, size_t index);

// A readable spelling of one value for plans and messages: 42, 'text', true, NULL,
// timestamp '20240501T000000Z'.
std::string DebugString(const Value& value);

}  // namespace tally::definitions
