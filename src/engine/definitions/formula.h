// The universal formula: from an object's state before and after a change, the increments
// that keep a derived counter exact. One rule in one place, instead of counting scattered
// over every code path that changes an object (create, edit, publish, delete, move).
//
//   inc[key(old)] -= value(old)   if old exists and passes the filter
//   inc[key(new)] += value(new)   if new exists and passes the filter
//   drop the increments that are zero; one increment per key
//
// Creation has no old row, deletion no new row. A change that moves a row between groups
// (a post moved to another blog) yields two increments; one that changes nothing a
// counter sees yields none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/definitions/aggregate.h"
#include "engine/definitions/program.h"

namespace tally::definitions {

// One increment of a derived counter: its canonical key (EncodeKey) and a non-zero delta.
struct Increment {
  std::string key;
  int64_t delta;

  bool operator==(const Increment&) const = default;
};

// Appends the increments of one change for one counter to `out` (at most two; none for
// a change the counter does not see). On error (a bad row, an overflow in an expression
// or in old and new combined) `out` is unchanged and the error message names the counter.
Status AppendIncrements(const CompiledCounter& counter, std::optional<RowView> old_row,
                        std::optional<RowView> new_row, EvalScratch& scratch,
                        std::vector<Increment>* out);

// The formula for a counter of layout kDistinct or kComposite (aggregate.h): appends the
// record deltas of one change to `out`, what the old row takes away and the new row adds,
// merged per record, zeros dropped (none for a change the counter does not see). On error
// (a bad row, an overflow) `out` is unchanged and the message names the counter.
Status AppendRecordDeltas(const CompiledCounter& counter, std::optional<RowView> old_row,
                          std::optional<RowView> new_row, EvalScratch& scratch,
                          std::vector<RecordDelta>* out);

// The same, returning the increments.
Result<std::vector<Increment>> ComputeIncrements(const CompiledCounter& counter,
                                                 std::optional<RowView> old_row,
                                                 std::optional<RowView> new_row,
                                                 EvalScratch& scratch);

}  // namespace tally::definitions
