#include "engine/definitions/formula.h"

#include <fmt/format.h>

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
