#include "programs/verify/compare.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>

#include "core/timestamp.h"
#include "engine/definitions/numeric.h"

namespace tally::verify {
namespace {

namespace defs = tally::definitions;
using Kind = defs::AggregateValue::Kind;

// How a value of aggregate `column` is shown (definitions/aggregate.cc: ShowTotal,
// ShowValueBytes, ShowAverage).
Kind ShownKind(const defs::AggregateColumn& column) {
  switch (column.kind) {
    case defs::Aggregate::kCountStar:
    case defs::Aggregate::kCount:
    case defs::Aggregate::kCountDistinct:
      return Kind::kInteger;
    case defs::Aggregate::kAvg:
      return Kind::kDecimal;
    case defs::Aggregate::kSum:
    case defs::Aggregate::kMin:
    case defs::Aggregate::kMax:
      break;
  }
  if (column.type == defs::Type::kNumeric) return Kind::kDecimal;
  if (column.type == defs::Type::kTimestamp) return Kind::kTimestamp;
  return Kind::kInteger;
}

// True for an optional '-', digits, and an optional '.' with digits.
bool IsDecimal(std::string_view text) {
  if (text.starts_with('-')) text.remove_prefix(1);
  const size_t point = text.find('.');
  const std::string_view whole = text.substr(0, point);
  const std::string_view fraction =
      point == std::string_view::npos ? std::string_view("0") : text.substr(point + 1);
  const auto digits = [](std::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  return digits(whole) && digits(fraction);
}

bool SameValue(const defs::GroupValue& a, const defs::GroupValue& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || defs::CompareValues(a[i], b[i]) != 0) return false;
  }
  return true;
}

}  // namespace

bool DropsZeroGroups(const defs::CompiledCounter& counter) {
  return counter.layout() != defs::Layout::kComposite;
}

bool IsZero(const defs::GroupValue& value) {
  if (value.size() != 1) return false;
  const defs::AggregateValue& v = value.front();
  switch (v.kind) {
    case Kind::kNull:
      return true;
    case Kind::kInteger:
      return v.integer == 0;
    case Kind::kDecimal:
      return v.text.find_first_not_of("-0.") == std::string::npos;
    case Kind::kTimestamp:
      break;
  }
  return false;
}

std::vector<Difference> Compare(const defs::CompiledCounter& counter, const Groups& tally,
                                const Groups& source) {
  const defs::GroupValue zero =
      DropsZeroGroups(counter) ? defs::ShowPlain(counter, 0) : defs::GroupValue();
  const auto equal = [&](const defs::GroupValue& a, const defs::GroupValue& b) {
    return SameValue(a.empty() ? zero : a, b.empty() ? zero : b);
  };
  std::vector<Difference> out;
  for (const auto& [key, value] : tally) {
    const auto it = source.find(key);
    const defs::GroupValue want = it == source.end() ? defs::GroupValue() : it->second;
    if (!equal(value, want)) out.push_back({key, value, want});
  }
  for (const auto& [key, value] : source) {
    if (!tally.contains(key) && !equal({}, value)) out.push_back({key, {}, value});
  }
  std::ranges::sort(out, {}, &Difference::key);
  return out;
}

std::string ShownText(const defs::CompiledCounter& counter, const defs::GroupValue& value) {
  if (!value.empty()) return defs::GroupText(value);
  return DropsZeroGroups(counter) ? defs::GroupText(defs::ShowPlain(counter, 0)) : "no group";
}

Result<defs::AggregateValue> ReadAggregate(const defs::AggregateColumn& column,
                                           std::string_view text) {
  switch (ShownKind(column)) {
    case Kind::kInteger: {
      int64_t value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size()) {
        return InvalidArgument(fmt::format("{} is not an int64", text.substr(0, 80)));
      }
      return defs::AggregateValue::Integer(value);
    }
    case Kind::kDecimal:
      if (!IsDecimal(text)) {
        return InvalidArgument(fmt::format("{} is not a decimal", text.substr(0, 80)));
      }
      return defs::AggregateValue::Decimal(std::string(text));
    case Kind::kTimestamp: {
      const Result<int64_t> micros = ParseTimestamp(text);
      if (!micros) {
        return InvalidArgument(fmt::format("{} is not a timestamp", text.substr(0, 80)));
      }
      return defs::AggregateValue::Timestamp(*micros);
    }
    case Kind::kNull:
      break;
  }
  return defs::AggregateValue::Null();
}

Result<int64_t> RepairValue(const defs::CompiledCounter& counter, const defs::GroupValue& value) {
  if (value.empty() || IsZero(value)) return 0;
  const defs::AggregateValue& v = value.front();
  if (v.kind == Kind::kInteger) return v.integer;
  auto units = defs::ReadDecimal(v.text, counter.aggregates().front().scale);
  if (!units) return InvalidArgument(fmt::format("{} {}", v.text, units.error().message));
  return *units;
}

size_t DropExpired(const defs::CompiledCounter& counter, int64_t now_micros, Groups& groups) {
  if (!counter.retention()) return 0;
  return std::erase_if(
      groups, [&](const auto& group) { return counter.KeyExpired(group.first, now_micros); });
}

}  // namespace tally::verify
