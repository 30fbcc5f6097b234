#include "engine/derived/change_cell.h"

#include <fmt/format.h>

#include "core/timestamp.h"
#include "engine/definitions/numeric.h"
#include "engine/derived/message_text.h"

namespace tally::derived {

using definitions::Type;
using definitions::Value;
namespace dom = simdjson::dom;

namespace {

// What a cell of `type` must be, for "must be ..." in messages.
std::string_view Expectation(Type type) {
  switch (type) {
    case Type::kInt64:
      return "an int64";
    case Type::kBool:
      return "a bool";
    case Type::kText:
      return "a string";
    case Type::kTimestamp:
      return "a timestamp like \"2024-05-01T13:45:00Z\"";
    case Type::kNumeric:
      return "a decimal like \"1234.50\" or 1234.5";
    case Type::kFloat:
      return "a number";
    case Type::kNull:
      break;
  }
  return "null";
}

// The refusal of a number for an int64 column that simdjson read as a double: one with a
// fraction or an exponent, or an integer past 64 bits (the decoder masked it,
// json_scan.h). Worded from the body's spelling when there is one.
CellRefusal RefuseDouble(double value, std::optional<std::string_view> spelling) {
  std::string text;
  if (spelling) {
    if (spelling->find_first_not_of("-0123456789") == std::string_view::npos) {
      return {"is out of the int64 range", Shown(*spelling)};
    }
    text = Shown(*spelling);
  } else {
    text = fmt::format("{}", value);
    if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
  }
  return {"must be an int64", text + " (a number with a fraction or an exponent)"};
}

// A number or a string for a numeric column of `scale`, exactly (change_json.h: a string
// or an integer as written; a number with a fraction through the double simdjson read,
// or, when that double's shortest spelling is not exact or the body was masked, through
// the body's spelling).
std::optional<CellRefusal> ConvertNumeric(
    dom::element value, int scale, bool masked,
    absl::FunctionRef<std::optional<std::string_view>()> spelling, Value* cell) {
  const auto refuse = [&](std::string_view got, const Error& why) {
    return CellRefusal{fmt::format("must be a decimal with at most {} digit{} after the point",
                                   scale, scale == 1 ? "" : "s"),
                       fmt::format("{} ({})", got, why.message)};
  };
  Result<int64_t> units = InvalidArgument("");
  switch (value.type()) {
    case dom::element_type::STRING: {
      const std::string_view text = value.get_string().value_unsafe();
      units = definitions::ReadDecimal(text, scale);
      if (!units) return refuse(Quoted(text), units.error());
      break;
    }
    case dom::element_type::INT64:
    case dom::element_type::UINT64: {
      const std::string text = value.type() == dom::element_type::INT64
                                   ? fmt::format("{}", value.get_int64().value_unsafe())
                                   : fmt::format("{}", value.get_uint64().value_unsafe());
      units = definitions::ReadDecimal(text, scale);
      if (!units) return refuse(text, units.error());
      break;
    }
    case dom::element_type::DOUBLE: {
      // A masked number (json_scan.h) reads as 0.0: only its spelling says what it was.
      const double number = value.get_double().value_unsafe();
      if (!masked || number != 0) units = definitions::DecimalOfDouble(number, scale);
      if (units) break;
      const std::optional<std::string_view> text = spelling();
      if (!text) return refuse(fmt::format("{}", number), units.error());
      units = definitions::ReadDecimal(*text, scale);
      if (!units) return refuse(Shown(*text), units.error());
      break;
    }
    default:
      return CellRefusal{fmt::format("must be {}", Expectation(Type::kNumeric)),
                         std::string(JsonKind(value.type()))};
  }
  *cell = Value::Numeric(*units, scale);
  return std::nullopt;
}

}  // namespace

std::string_view JsonKind(dom::element_type type) {
  switch (type) {
    case dom::element_type::ARRAY:
      return "an array";
    case dom::element_type::OBJECT:
      return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
    case dom::element_type::DOUBLE:
      return "a number";
    case dom::element_type::STRING:
      return "a string";
    case dom::element_type::BOOL:
      return "a boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
  }
  return "a value";
}

std::optional<CellRefusal> ConvertCell(
    dom::element value, const definitions::SourceSchema::Column& column, TextArena& arena,
    bool masked, absl::FunctionRef<std::optional<std::string_view>()> spelling, Value* cell) {
  const Type type = column.type;
  const dom::element_type kind = value.type();
  if (kind == dom::element_type::NULL_VALUE) return std::nullopt;  // the cell stays NULL
  const auto refuse = [&](std::string got) {
    return CellRefusal{fmt::format("must be {}", Expectation(type)), std::move(got)};
  };
  switch (type) {
    case Type::kInt64:
      if (kind == dom::element_type::INT64) {
        *cell = Value::Int(value.get_int64().value_unsafe());
        return std::nullopt;
      }
      if (kind == dom::element_type::UINT64) {
        return CellRefusal{"is out of the int64 range",
                           fmt::format("{}", value.get_uint64().value_unsafe())};
      }
      if (kind == dom::element_type::DOUBLE) {
        return RefuseDouble(value.get_double().value_unsafe(), spelling());
      }
      return refuse(std::string(JsonKind(kind)));
    case Type::kBool:
      if (kind != dom::element_type::BOOL) return refuse(std::string(JsonKind(kind)));
      *cell = Value::Bool(value.get_bool().value_unsafe());
      return std::nullopt;
    case Type::kText:
      if (kind != dom::element_type::STRING) return refuse(std::string(JsonKind(kind)));
      *cell = Value::Text(arena.Copy(value.get_string().value_unsafe()));
      return std::nullopt;
    case Type::kTimestamp: {
      if (kind != dom::element_type::STRING) return refuse(std::string(JsonKind(kind)));
      const std::string_view text = value.get_string().value_unsafe();
      const Result<int64_t> micros = ParseTimestamp(text);
      if (!micros) return refuse(Quoted(text));
      *cell = Value::Timestamp(*micros);
      return std::nullopt;
    }
    case Type::kNumeric:
      return ConvertNumeric(value, column.scale, masked, spelling, cell);
    case Type::kFloat:
      // Only counted (value.h), so the nearest double is enough; a masked 1e400 is still
      // a value, not NULL.
      if (kind != dom::element_type::INT64 && kind != dom::element_type::UINT64 &&
          kind != dom::element_type::DOUBLE) {
        return refuse(std::string(JsonKind(kind)));
      }
      *cell = Value::Float(value.get_double().value_unsafe());
      return std::nullopt;
    case Type::kNull:
      break;
  }
  return refuse(std::string(JsonKind(kind)));
}

}  // namespace tally::derived
