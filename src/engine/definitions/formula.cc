#include "engine/definitions/formula.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/definitions/numeric.h"

namespace tally::definitions {
namespace {

tl::unexpected<Error> WithCounter(const CompiledCounter& counter, std::string_view row,
                                  const Error& error) {
  return MakeError(error.code,
                   fmt::format("counter {}, {} row: {}", counter.name(), row, error.message));
}

}  // namespace

Status AppendIncrements(const CompiledCounter& counter, std::optional<RowView> old_row,
                        std::optional<RowView> new_row, EvalScratch& scratch,
                        std::vector<Increment>* out) {
  // Each side's key is encoded before the scratch is reused for the other side.
  std::optional<Increment> minus;
  if (old_row) {
    auto old_eval = counter.Evaluate(*old_row, scratch);
    if (!old_eval) return WithCounter(counter, "old", old_eval.error());
    if (old_eval->passes) {
      if (old_eval->value == INT64_MIN) {
        return MakeError(ErrorCode::kOverflow,
                         fmt::format("counter {}: bigint out of range", counter.name()));
      }
      minus = Increment{counter.Key(*old_eval), -old_eval->value};
    }
  }
  std::optional<Increment> plus;
  if (new_row) {
    auto new_eval = counter.Evaluate(*new_row, scratch);
    if (!new_eval) return WithCounter(counter, "new", new_eval.error());
    if (new_eval->passes) plus = Increment{counter.Key(*new_eval), new_eval->value};
  }
  if (minus && plus && minus->key == plus->key) {
    int64_t sum;
    if (__builtin_add_overflow(minus->delta, plus->delta, &sum)) {
      return MakeError(ErrorCode::kOverflow,
                       fmt::format("counter {}: bigint out of range", counter.name()));
    }
    plus->delta = sum;
    minus.reset();
  }
  if (minus && minus->delta != 0) out->push_back(std::move(*minus));
  if (plus && plus->delta != 0) out->push_back(std::move(*plus));
  return OkStatus();
}

namespace {

// The units of an int64 or numeric argument at the scale of its aggregate.
Result<int64_t> UnitsOf(const AggregateColumn& column, const Value& value) {
  const std::optional<int64_t> units = Rescale(value.i, value.scale, column.scale);
  if (!units) {
    return MakeError(ErrorCode::kOverflow,
                     "numeric value out of range (tally keeps at most 18 digits)");
  }
  return *units;
}

// The deltas one side of a change (sign -1: the old row, +1: the new) brings, appended to
// `out` unmerged.
Status AppendSide(const CompiledCounter& counter, RowView row, int sign, std::string_view which,
                  EvalScratch& scratch, std::vector<RecordDelta>* out) {
  auto eval = counter.Evaluate(row, scratch);
  if (!eval) return WithCounter(counter, which, eval.error());
  if (!eval->passes) return OkStatus();
  const std::string group = counter.Key(*eval);
  auto add = [&](uint32_t aggregate, RecordKind kind, std::string value, int64_t delta) {
    out->push_back(RecordDelta{group, aggregate, kind, std::move(value), delta});
  };
  if (counter.layout() == Layout::kComposite) add(0, RecordKind::kRows, {}, sign);
  const std::vector<AggregateColumn>& aggregates = counter.aggregates();
  for (uint32_t i = 0; i < aggregates.size(); ++i) {
    const AggregateColumn& column = aggregates[i];
    const Value& arg = eval->args[i];
    if (column.kind == Aggregate::kCountStar || arg.is_null()) continue;
    switch (column.kind) {
      case Aggregate::kCount:
        add(i, RecordKind::kCount, {}, sign);
        break;
      case Aggregate::kSum:
      case Aggregate::kAvg: {
        auto units = UnitsOf(column, arg);
        if (!units) return WithCounter(counter, which, units.error());
        if (sign < 0 && *units == INT64_MIN) {
          return MakeError(ErrorCode::kOverflow,
                           fmt::format("counter {}: bigint out of range", counter.name()));
        }
        add(i, RecordKind::kSum, {}, sign * *units);
        // avg needs its count; a sum too, to be NULL while it has no value (PostgreSQL's).
        add(i, RecordKind::kCount, {}, sign);
        break;
      }
      default: {
        auto bytes = ValueBytes(column, arg);
        if (!bytes) return WithCounter(counter, which, bytes.error());
        add(i, RecordKind::kValue, std::move(*bytes), sign);
        break;
      }
    }
  }
  return OkStatus();
}

}  // namespace

Status AppendRecordDeltas(const CompiledCounter& counter, std::optional<RowView> old_row,
                          std::optional<RowView> new_row, EvalScratch& scratch,
                          std::vector<RecordDelta>* out) {
  thread_local std::vector<RecordDelta> sides;
  sides.clear();
  if (old_row) {
    if (auto s = AppendSide(counter, *old_row, -1, "old", scratch, &sides); !s) return s;
  }
  if (new_row) {
    if (auto s = AppendSide(counter, *new_row, +1, "new", scratch, &sides); !s) return s;
  }
  // Merge per record: an update that keeps a row in its group and its values changes
  // nothing. A side has few deltas, so a quadratic merge is the cheap one.
  const size_t first = out->size();
  for (RecordDelta& delta : sides) {
    auto same = [&](const RecordDelta& d) {
      return d.aggregate == delta.aggregate && d.kind == delta.kind && d.value == delta.value &&
             d.group == delta.group;
    };
    const auto it =
        std::find_if(out->begin() + static_cast<std::ptrdiff_t>(first), out->end(), same);
    if (it == out->end()) {
      out->push_back(std::move(delta));
      continue;
    }
    int64_t sum;
    if (__builtin_add_overflow(it->delta, delta.delta, &sum)) {
      out->resize(first);
      return MakeError(ErrorCode::kOverflow,
                       fmt::format("counter {}: bigint out of range", counter.name()));
    }
    it->delta = sum;
  }
  out->erase(std::remove_if(out->begin() + static_cast<std::ptrdiff_t>(first), out->end(),
                            [](const RecordDelta& d) { return d.delta == 0; }),
             out->end());
  return OkStatus();
}

Result<std::vector<Increment>> ComputeIncrements(const CompiledCounter& counter,
                                                 std::optional<RowView> old_row,
                                                 std::optional<RowView> new_row,
                                                 EvalScratch& scratch) {
  std::vector<Increment> out;
  if (auto s = AppendIncrements(counter, old_row, new_row, scratch, &out); !s) {
    return tl::unexpected(s.error());
  }
  return out;
}

}  // namespace tally::definitions
