// StateWrites: the apply path's part for counters that are not plain (aggregate_state.h has
// the design): one batch's record deltas (definitions' AppendRecordDeltas) summed per
// record, checked, then written in the batch's View together with each group's key and
// the family's index and mirror.
//
// Used by the Applier (apply.h) in three steps within one View, so that a batch is
// visible and durable together with its plain increments, or refused whole:
//   1. Take and AddKeys, before the View: every key the deltas may write (each group's key
//      and its records), to be locked;
//   2. Plan, under the View: the deltas that are due summed per record and per group's
//      rows, every new value checked against int64; nothing written (kOverflow, naming the
//      counter and the key, refuses the batch);
//   3. Write, under the View, after the plain increments' own checks passed.
//
// Thread-safety: one instance per thread (the Applier keeps one in its thread-local
// scratch). Plan and Write take each family's index mutex inside the View, as the
// Applier's own writes do.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/definitions/aggregate.h"
#include "engine/derived/family.h"
#include "engine/keyspace.h"

namespace tally::derived {

struct PushOutcome;

class StateWrites {
 public:
  // Forgets the previous batch and takes the deltas of this one: deltas[j] of families[j].
  // The spans must live until Write.
  void Take(std::span<const definitions::RecordDelta> deltas, std::span<Family* const> families);
  // Appends to `keys` every key the deltas taken may write.
  void AddKeys(std::vector<engine::HashedKey>* keys) const;

  // Sums the deltas for which due(j) holds per record and checks the new values; nothing is
  // written. REQUIRES: `view` holds every key AddKeys gave.
  Status Plan(engine::View& view, const std::function<bool(size_t)>& due);

  // Writes what Plan checked, adding one to outcome->increments per group written.
  void Write(engine::View& view, PushOutcome* outcome);

 private:
  struct RecordPlan {
    size_t delta = 0;   // the first delta of this record, which names it
    int64_t sum = 0;    // of its deltas
    int64_t value = 0;  // the new value (Plan)
  };
  struct GroupPlan {
    Family* family = nullptr;
    std::string_view group;
    int64_t rows = 0;             // the sum of its kRows deltas
    int64_t new_rows = 0;         // kComposite: K's new value (Plan)
    std::vector<size_t> records;  // indexes into records_
  };

  std::span<const definitions::RecordDelta> deltas_;
  std::span<Family* const> families_;
  std::vector<std::string> record_keys_;  // per delta; empty for kRows
  std::vector<RecordPlan> records_;
  std::vector<GroupPlan> groups_;
  absl::flat_hash_map<absl::string_view, size_t> record_index_;  // record key -> records_
  absl::flat_hash_map<absl::string_view, size_t> group_index_;   // group key -> groups_
};

}  // namespace tally::derived
