#include "engine/definitions/aggregate.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>

#include "core/timestamp.h"
#include "engine/definitions/numeric.h"

namespace tally::definitions {

namespace {

constexpr uint64_t kSignBit = uint64_t{1} << 63;

// -1, 0 or 1 ordering two non-negative decimal spellings ("12.5", "3.250").
int CompareMagnitudes(std::string_view a, std::string_view b) {
  const size_t a_point = std::min(a.find('.'), a.size());
  const size_t b_point = std::min(b.find('.'), b.size());
  if (a_point != b_point) return a_point < b_point ? -1 : 1;  // no leading zeros
  const size_t length = std::max(a.size(), b.size());
  for (size_t i = 0; i < length; ++i) {
    const char x = i < a.size() ? a[i] : '0';
    const char y = i < b.size() ? b[i] : '0';
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

// -1, 0 or 1 ordering two decimal spellings.
int CompareDecimals(std::string_view a, std::string_view b) {
  const bool a_negative = a.starts_with('-');
  const bool b_negative = b.starts_with('-');
  if (a_negative != b_negative) return a_negative ? -1 : 1;
  const int magnitude =
      CompareMagnitudes(a.substr(a_negative ? 1 : 0), b.substr(b_negative ? 1 : 0));
  return a_negative ? -magnitude : magnitude;
}

}  // namespace

bool ShowsInteger(const CompiledCounter& counter) {
  if (counter.layout() != Layout::kPlain) return false;
  const AggregateColumn& column = counter.aggregates().front();
  return !(column.kind == Aggregate::kSum && column.type == Type::kNumeric);
}

int CompareValues(const AggregateValue& a, const AggregateValue& b) {
  using Kind = AggregateValue::Kind;
  if (a.kind == Kind::kNull || b.kind == Kind::kNull) {
    return a.kind == b.kind ? 0 : (a.kind == Kind::kNull ? -1 : 1);
  }
  if (a.kind == Kind::kDecimal && b.kind == Kind::kDecimal) return CompareDecimals(a.text, b.text);
  return a.integer < b.integer ? -1 : (a.integer > b.integer ? 1 : 0);
}

void AppendRecordTag(uint32_t aggregate, RecordKind kind, std::string_view value,
                     std::string* out) {
  fmt::format_to(std::back_inserter(*out), "{}", aggregate);
  switch (kind) {
    case RecordKind::kSum:
      out->push_back('s');
      return;
    case RecordKind::kCount:
      out->push_back('n');
      return;
    case RecordKind::kValue:
      out->push_back('v');
      out->append(value);
      return;
    case RecordKind::kRows:
      break;
  }
}

std::optional<RecordTag> ParseRecordTag(std::string_view tag) {
  RecordTag out;
  const auto [end, error] = std::from_chars(tag.data(), tag.data() + tag.size(), out.aggregate);
  if (error != std::errc() || end == tag.data() || end == tag.data() + tag.size()) {
    return std::nullopt;
  }
  tag.remove_prefix(static_cast<size_t>(end - tag.data()));
  switch (tag.front()) {
    case 's':
      out.kind = RecordKind::kSum;
      break;
    case 'n':
      out.kind = RecordKind::kCount;
      break;
    case 'v':
      out.kind = RecordKind::kValue;
      break;
    default:
      return std::nullopt;
  }
  out.value = tag.substr(1);
  if (out.kind != RecordKind::kValue && !out.value.empty()) return std::nullopt;
  return out;
}

Status CheckRecordTag(const CompiledCounter& counter, const RecordTag& tag) {
  const std::vector<AggregateColumn>& columns = counter.aggregates();
  if (tag.aggregate >= columns.size()) {
    return InvalidArgument(fmt::format("counter {} has no aggregate {} (it has {}, from 0)",
                                       counter.name(), tag.aggregate, columns.size()));
  }
  const AggregateColumn& column = columns[tag.aggregate];
  bool kept = false;  // the formula's rule (formula.cc: AppendSide)
  switch (column.kind) {
    case Aggregate::kCountStar:
      break;
    case Aggregate::kCount:
      kept = tag.kind == RecordKind::kCount;
      break;
    case Aggregate::kSum:
    case Aggregate::kAvg:
      kept = tag.kind == RecordKind::kSum || tag.kind == RecordKind::kCount;
      break;
    case Aggregate::kCountDistinct:
    case Aggregate::kMin:
    case Aggregate::kMax:
      kept = tag.kind == RecordKind::kValue;
      break;
  }
  if (!kept) {
    return InvalidArgument(fmt::format("aggregate {} of counter {} ({}) keeps no record of kind {}",
                                       tag.aggregate, counter.name(), column.sql,
                                       tag.kind == RecordKind::kSum     ? "s (a sum)"
                                       : tag.kind == RecordKind::kCount ? "n (a count)"
                                                                        : "v (a value)"));
  }
  if (tag.kind != RecordKind::kValue) return OkStatus();
  switch (column.type) {
    case Type::kText:
      return OkStatus();
    case Type::kBool:
      if (tag.value.size() == 1 && (tag.value[0] == '\0' || tag.value[0] == '\1')) {
        return OkStatus();
      }
      break;
    default:
      if (tag.value.size() == 8) return OkStatus();
      break;
  }
  return InvalidArgument(fmt::format(
      "aggregate {} of counter {} ({}): the value bytes of its {} argument are {}, not these {}",
      tag.aggregate, counter.name(), column.sql, TypeName(column.type),
      column.type == Type::kBool ? "one byte, 0 or 1" : "8 bytes", tag.value.size()));
}

Result<std::string> ValueBytes(const AggregateColumn& column, const Value& value) {
  switch (value.type) {
    case Type::kText:
      return std::string(value.s);
    case Type::kBool:
      return std::string(1, value.i != 0 ? '\1' : '\0');
    default:
      break;
  }
  int64_t number = value.i;
  if (column.type == Type::kNumeric) {
    const std::optional<int64_t> units = Rescale(value.i, value.scale, column.scale);
    if (!units) {
      return MakeError(ErrorCode::kOverflow,
                       "numeric value out of range (tally keeps at most 18 digits)");
    }
    number = *units;
  }
  const uint64_t bits = static_cast<uint64_t>(number) ^ kSignBit;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(bits >> (56 - 8 * i));
  return out;
}

int64_t IntOfValueBytes(std::string_view bytes) {
  uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(bytes[i]);
  return static_cast<int64_t>(bits ^ kSignBit);
}

AggregateValue AggregateValue::Timestamp(int64_t micros) {
  return {Kind::kTimestamp, micros, FormatTimestamp(micros)};
}

AggregateValue ShowTotal(const AggregateColumn& column, int64_t total) {
  if (column.kind == Aggregate::kSum && column.type == Type::kNumeric) {
    return AggregateValue::Decimal(FormatDecimal(total, column.scale));
  }
  return AggregateValue::Integer(total);
}

AggregateValue ShowValueBytes(const AggregateColumn& column, std::string_view bytes) {
  const int64_t number = IntOfValueBytes(bytes);
  switch (column.type) {
    case Type::kNumeric:
      return AggregateValue::Decimal(FormatDecimal(number, column.scale));
    case Type::kTimestamp:
      return AggregateValue::Timestamp(number);
    default:
      return AggregateValue::Integer(number);
  }
}

AggregateValue ShowAverage(const AggregateColumn& column, int64_t sum, int64_t count) {
  if (count <= 0) return AggregateValue::Null();
  return AggregateValue::Decimal(AvgText(sum, column.scale, count));
}

GroupValue ShowPlain(const CompiledCounter& counter, int64_t value) {
  return {ShowTotal(counter.aggregates().front(), value)};
}

std::string ValueText(const AggregateValue& value) {
  switch (value.kind) {
    case AggregateValue::Kind::kNull:
      return "NULL";
    case AggregateValue::Kind::kInteger:
      return fmt::format("{}", value.integer);
    case AggregateValue::Kind::kDecimal:
    case AggregateValue::Kind::kTimestamp:
      break;
  }
  return value.text;
}

std::string GroupText(const GroupValue& value) {
  if (value.size() == 1) return ValueText(value.front());
  std::string out = "(";
  for (size_t i = 0; i < value.size(); ++i) {
    if (i > 0) out += ", ";
    out += ValueText(value[i]);
  }
  return out + ")";
}

}  // namespace tally::definitions
