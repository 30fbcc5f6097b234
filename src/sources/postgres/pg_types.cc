#include "sources/postgres/pg_types.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

#include "core/timestamp.h"
#include "engine/definitions/numeric.h"

namespace tally::postgres {
namespace {

using definitions::Type;
using definitions::Value;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// An optional '-' and one or more digits, within int64, nothing else.
std::optional<int64_t> ParseDecimal(std::string_view s) {
  if (s.empty()) return std::nullopt;
  const size_t digits_from = s[0] == '-' ? 1 : 0;
  if (digits_from == s.size()) return std::nullopt;
  for (size_t i = digits_from; i < s.size(); ++i) {
    if (!IsDigit(s[i])) return std::nullopt;
  }
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

Result<Value> ParseInteger(std::string_view type, std::string_view text) {
  if (auto v = ParseDecimal(text)) return Value::Int(*v);
  return InvalidArgument(fmt::format("{} value '{}' is not an integer within int64", type, text));
}

Result<Value> ParseNumeric(std::string_view text) {
  if (text == "NaN" || text == "Infinity" || text == "-Infinity") {
    return InvalidArgument(fmt::format("numeric value '{}' does not fit int64", text));
  }
  std::string_view whole = text;
  if (const size_t dot = text.find('.'); dot != std::string_view::npos) {
    whole = text.substr(0, dot);
    const std::string_view fraction = text.substr(dot + 1);
    if (fraction.empty()) whole = {};  // "12." is not PostgreSQL output
    for (char c : fraction) {
      if (c != '0') {
        return InvalidArgument(
            fmt::format("numeric value '{}' is not an integer; an int64 column needs one", text));
      }
    }
  }
  if (auto v = ParseDecimal(whole)) return Value::Int(*v);
  return InvalidArgument(fmt::format("numeric value '{}' is not an integer within int64", text));
}

// A date, timestamp or timestamptz value, read by the one timestamp reader of tally
// (core/timestamp.h), of which PostgreSQL's ISO output is a part. A date is midnight UTC,
// a timestamp without an offset is taken as UTC.
Result<Value> ParseTime(std::string_view type, std::string_view text) {
  const Result<int64_t> micros = ParseTimestamp(text);
  if (!micros) {
    return InvalidArgument(fmt::format("{} value '{}' {}", type, text, micros.error().message));
  }
  return Value::Timestamp(*micros);
}

}  // namespace

std::optional<Type> TallyTypeForPg(uint32_t type_oid) {
  switch (type_oid) {
    case kInt2Oid:
    case kInt4Oid:
    case kInt8Oid:
    case kNumericOid:
      return Type::kInt64;
    case kBoolOid:
      return Type::kBool;
    case kTextOid:
    case kVarcharOid:
    case kBpcharOid:
    case kNameOid:
      return Type::kText;
    case kDateOid:
    case kTimestampOid:
    case kTimestamptzOid:
      return Type::kTimestamp;
    default:
      return std::nullopt;
  }
}

std::string PgTypeName(uint32_t type_oid) {
  switch (type_oid) {
    case kBoolOid:
      return "bool";
    case 17:
      return "bytea";
    case 18:
      return "char";
    case kNameOid:
      return "name";
    case kInt8Oid:
      return "int8";
    case kInt2Oid:
      return "int2";
    case kInt4Oid:
      return "int4";
    case kTextOid:
      return "text";
    case 26:
      return "oid";
    case 114:
      return "json";
    case 700:
      return "float4";
    case 701:
      return "float8";
    case 790:
      return "money";
    case 869:
      return "inet";
    case kBpcharOid:
      return "bpchar";
    case kVarcharOid:
      return "varchar";
    case kDateOid:
      return "date";
    case 1083:
      return "time";
    case kTimestampOid:
      return "timestamp";
    case kTimestamptzOid:
      return "timestamptz";
    case 1186:
      return "interval";
    case 1266:
      return "timetz";
    case kNumericOid:
      return "numeric";
    case 2950:
      return "uuid";
    case 3802:
      return "jsonb";
    default:
      return fmt::format("type oid {}", type_oid);
  }
}

bool Feeds(uint32_t type_oid, Type type) {
  switch (type) {
    case Type::kNumeric:
      return type_oid == kNumericOid || type_oid == kInt2Oid || type_oid == kInt4Oid ||
             type_oid == kInt8Oid;
    case Type::kFloat:
      return type_oid == kFloat4Oid || type_oid == kFloat8Oid;
    default: {
      const std::optional<Type> fed = TallyTypeForPg(type_oid);
      return fed && *fed == type;
    }
  }
}

Result<Value> ParsePgCell(uint32_t type_oid, const definitions::SourceSchema::Column& column,
                          std::string_view text) {
  if (column.type == Type::kNumeric) {
    auto units = definitions::ParseDecimal(text, column.scale);
    if (!units) {
      return InvalidArgument(
          fmt::format("{} value {}", PgTypeName(type_oid), units.error().message));
    }
    return Value::Numeric(*units, column.scale);
  }
  if (column.type == Type::kFloat) {
    if (text == "NaN") return Value::Float(std::numeric_limits<double>::quiet_NaN());
    if (text == "Infinity") return Value::Float(std::numeric_limits<double>::infinity());
    if (text == "-Infinity") return Value::Float(-std::numeric_limits<double>::infinity());
    double v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size()) {
      return InvalidArgument(
          fmt::format("{} value '{}' is not a number", PgTypeName(type_oid), text.substr(0, 40)));
    }
    return Value::Float(v);
  }
  return ParsePgText(type_oid, text);
}

Result<Value> ParsePgText(uint32_t type_oid, std::string_view text) {
  switch (type_oid) {
    case kInt2Oid:
    case kInt4Oid:
    case kInt8Oid:
      return ParseInteger(PgTypeName(type_oid), text);
    case kNumericOid:
      return ParseNumeric(text);
    case kBoolOid:
      if (text == "t") return Value::Bool(true);
      if (text == "f") return Value::Bool(false);
      return InvalidArgument(fmt::format("bool value '{}' is neither 't' nor 'f'", text));
    case kTextOid:
    case kVarcharOid:
    case kBpcharOid:
    case kNameOid:
      return Value::Text(text);
    case kDateOid:
      return ParseTime("date", text);
    case kTimestampOid:
      return ParseTime("timestamp", text);
    case kTimestamptzOid:
      return ParseTime("timestamptz", text);
    default:
      return InvalidArgument(
          fmt::format("PostgreSQL type {} cannot be read by tally", PgTypeName(type_oid)));
  }
}

Result<ColumnMapping> MapColumns(const RelationMessage& relation,
                                 const definitions::SourceSchema& schema,
                                 const std::vector<bool>& needed) {
  ColumnMapping mapping;
  mapping.relation_oid = relation.oid;
  mapping.table = relation.QualifiedName();
  mapping.relation_columns = relation.columns.size();
  mapping.columns.reserve(schema.columns.size());
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const auto& column = schema.columns[i];
    size_t j = 0;
    while (j < relation.columns.size() && relation.columns[j].name != column.name) ++j;
    const bool is_needed = needed.empty() || (i < needed.size() && needed[i]);
    if (!is_needed &&
        (j == relation.columns.size() || !Feeds(relation.columns[j].type_oid, column.type))) {
      mapping.columns.push_back({column.name, ColumnMapping::kAbsent, 0, column.type, 0});
      continue;
    }
    if (j == relation.columns.size()) {
      return InvalidArgument(
          fmt::format("table {} has no column {}, which source {} needs (dropped or renamed?)",
                      mapping.table, column.name, schema.name));
    }
    const uint32_t oid = relation.columns[j].type_oid;
    const auto pg_type = TallyTypeForPg(oid);
    if (!Feeds(oid, column.type)) {
      return InvalidArgument(fmt::format(
          "table {} column {} has PostgreSQL type {}, which does not fit source {}'s {} "
          "column{}",
          mapping.table, column.name, PgTypeName(oid), schema.name,
          definitions::TypeName(column.type),
          pg_type ? fmt::format(" (it would feed a {} column)", definitions::TypeName(*pg_type))
                  : std::string(" (tally cannot read this type)")));
    }
    mapping.columns.push_back({column.name, j, oid, column.type, column.scale});
  }
  return mapping;
}

Status TupleToRow(const ColumnMapping& mapping, const Tuple& tuple, const Tuple* old_tuple,
                  std::vector<Value>* row) {
  if (tuple.cells.size() != mapping.relation_columns) {
    return Corruption(
        fmt::format("a tuple of table {} has {} columns, but its Relation message announced {}",
                    mapping.table, tuple.cells.size(), mapping.relation_columns));
  }
  if (old_tuple != nullptr && old_tuple->cells.size() != mapping.relation_columns) {
    return Corruption(fmt::format(
        "an old tuple of table {} has {} columns, but its Relation message announced {}",
        mapping.table, old_tuple->cells.size(), mapping.relation_columns));
  }
  row->clear();
  row->reserve(mapping.columns.size());
  for (const auto& column : mapping.columns) {
    if (column.relation_index == ColumnMapping::kAbsent) {
      row->push_back(Value::Null());
      continue;
    }
    const TupleCell* cell = &tuple.cells[column.relation_index];
    if (cell->kind == TupleCell::Kind::kUnchangedToast) {
      const TupleCell* old =
          old_tuple != nullptr ? &old_tuple->cells[column.relation_index] : nullptr;
      if (old == nullptr || old->kind == TupleCell::Kind::kUnchangedToast) {
        return InvalidArgument(fmt::format(
            "table {} column {}: the change left a TOASTed value unchanged and sent no old "
            "value for it (the table needs REPLICA IDENTITY FULL)",
            mapping.table, column.name));
      }
      cell = old;
    }
    if (cell->kind == TupleCell::Kind::kNull) {
      row->push_back(Value::Null());
      continue;
    }
    const definitions::SourceSchema::Column typed{column.name, column.type, 0, column.scale};
    auto value = ParsePgCell(column.type_oid, typed, cell->text);
    if (!value) {
      return InvalidArgument(
          fmt::format("table {} column {}: {}", mapping.table, column.name, value.error().message));
    }
    row->push_back(*value);
  }
  return OkStatus();
}

}  // namespace tally::postgres
