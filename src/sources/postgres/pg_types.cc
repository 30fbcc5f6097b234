#include "sources/postgres/pg_types.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

#include "engine/definitions/time_util.h"

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

// A cursor over PostgreSQL's ISO date/time output.
class TimeText {
 public:
  explicit TimeText(std::string_view s) : s_(s) {}
  bool done() const { return i_ == s_.size(); }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  // Between min and max digits, greedily.
  bool Number(size_t min, size_t max, int64_t* out, size_t* count = nullptr) {
    size_t n = 0;
    int64_t v = 0;
    while (i_ < s_.size() && n < max && IsDigit(s_[i_])) {
      v = v * 10 + (s_[i_++] - '0');
      ++n;
    }
    if (count != nullptr) *count = n;
    *out = v;
    return n >= min;
  }
  std::string_view rest() const { return s_.substr(i_); }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int DaysInMonth(int64_t year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && IsLeap(year) ? 29 : kDays[month - 1];
}

// a * b + c, or nullopt on overflow.
std::optional<int64_t> MulAdd(int64_t a, int64_t b, int64_t c) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return std::nullopt;
  return r;
}

enum class TimeKind { kDate, kTimestamp, kTimestamptz };

Result<Value> ParseTime(TimeKind kind, std::string_view type, std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("{} value '{}' {}", type, text, why));
  };
  if (text == "infinity" || text == "-infinity") {
    return bad("is infinite; tally's timestamps are finite");
  }
  if (text.ends_with(" BC")) return bad("is before the common era (BC); it is not supported");

  TimeText in(text);
  int64_t year, month, day;
  if (!in.Number(4, 7, &year) || !in.Eat('-') || !in.Number(2, 2, &month) || !in.Eat('-') ||
      !in.Number(2, 2, &day)) {
    return bad("is not a date in ISO format (YYYY-MM-DD)");
  }
  if (month < 1 || month > 12 || day < 1 || day > DaysInMonth(year, static_cast<int>(month))) {
    return bad("is not a valid date");
  }
  int64_t seconds_of_day = 0, micros = 0, offset_seconds = 0;
  if (kind != TimeKind::kDate) {
    int64_t h, m, s;
    if (!in.Eat(' ') || !in.Number(2, 2, &h) || !in.Eat(':') || !in.Number(2, 2, &m) ||
        !in.Eat(':') || !in.Number(2, 2, &s)) {
      return bad("is not in ISO format (YYYY-MM-DD HH:MM:SS[.ffffff])");
    }
    if (h > 23 || m > 59 || s > 59) return bad("has an invalid time of day");
    seconds_of_day = h * 3600 + m * 60 + s;
    if (in.Eat('.')) {
      size_t n = 0;
      if (!in.Number(1, 6, &micros, &n)) return bad("has an empty fraction of a second");
      for (; n < 6; ++n) micros *= 10;
    }
    if (kind == TimeKind::kTimestamptz) {
      int sign = 0;
      if (in.Eat('+'))
        sign = 1;
      else if (in.Eat('-'))
        sign = -1;
      int64_t oh = 0, om = 0, os = 0;
      if (sign == 0 || !in.Number(2, 2, &oh)) {
        return bad("has no UTC offset (+HH, +HH:MM or +HH:MM:SS)");
      }
      if (in.Eat(':')) {
        if (!in.Number(2, 2, &om)) return bad("has an invalid UTC offset");
        if (in.Eat(':') && !in.Number(2, 2, &os)) return bad("has an invalid UTC offset");
      }
      if (oh > 23 || om > 59 || os > 59) return bad("has an invalid UTC offset");
      offset_seconds = sign * (oh * 3600 + om * 60 + os);
    }
  }
  if (!in.done()) return bad(fmt::format("has unexpected text '{}'", in.rest()));

  const int64_t days =
      definitions::DaysFromCivil(year, static_cast<int>(month), static_cast<int>(day));
  const auto seconds = MulAdd(days, 86400, seconds_of_day - offset_seconds);
  const auto result =
      seconds ? MulAdd(*seconds, definitions::kMicrosPerSecond, micros) : std::nullopt;
  if (!result) return bad("is outside the range of tally's timestamps");
  return Value::Timestamp(*result);
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
      return ParseTime(TimeKind::kDate, "date", text);
    case kTimestampOid:
      return ParseTime(TimeKind::kTimestamp, "timestamp", text);
    case kTimestamptzOid:
      return ParseTime(TimeKind::kTimestamptz, "timestamptz", text);
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
    const auto fits = [&] {
      const auto pg_type = TallyTypeForPg(relation.columns[j].type_oid);
      return pg_type && *pg_type == column.type;
    };
    if (!is_needed && (j == relation.columns.size() || !fits())) {
      mapping.columns.push_back({column.name, ColumnMapping::kAbsent, 0, column.type});
      continue;
    }
    if (j == relation.columns.size()) {
      return InvalidArgument(
          fmt::format("table {} has no column {}, which source {} needs (dropped or renamed?)",
                      mapping.table, column.name, schema.name));
    }
    const uint32_t oid = relation.columns[j].type_oid;
    const auto pg_type = TallyTypeForPg(oid);
    if (!pg_type || *pg_type != column.type) {
      return InvalidArgument(fmt::format(
          "table {} column {} has PostgreSQL type {}, which does not fit source {}'s {} "
          "column{}",
          mapping.table, column.name, PgTypeName(oid), schema.name,
          definitions::TypeName(column.type),
          pg_type ? fmt::format(" (it would feed a {} column)", definitions::TypeName(*pg_type))
                  : std::string(" (tally cannot read this type)")));
    }
    mapping.columns.push_back({column.name, j, oid, column.type});
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
    auto value = ParsePgText(column.type_oid, cell->text);
    if (!value) {
      return InvalidArgument(
          fmt::format("table {} column {}: {}", mapping.table, column.name, value.error().message));
    }
    row->push_back(*value);
  }
  return OkStatus();
}

}  // namespace tally::postgres
