// Family: one derived counter as the derived layer holds it in memory: its compiled
// definition, the position it counts from, and the index of its live groups (the keys
// "<counter>:..." of the keyspace, or the one key "<counter>" of a counter without key
// columns) with its cached top-K answers. Every part of the derived
// layer works on families; the catalog (catalog.h) owns them, shared between its snapshots.
//
// The index holds keys only; values are always read from the keyspace. Catalog::Load
// rebuilds it from the keyspace at start, and whatever adds or removes a group keeps it in
// step: the apply path (a group appears, or returns to 0 and is deleted), repairs,
// truncates, drops, resets and the retention sweep.
//
// Thread-safety. `counter` never changes. `start` is written with the apply lock held
// exclusively and read with it held (shared or exclusive); the apply lock is
// DerivedCounters', see derived_counters.h. `backfilling` and `version` are atomics, read
// and written anywhere. `mutex` guards the index (keys, by_bucket, top_cache): it is taken
// alone or inside a View's stripe locks, never while a View is being taken, and held for
// index operations only.
#pragma once

#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_map.h>
#include <absl/strings/string_view.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/absl_string.h"
#include "core/status.h"
#include "engine/definitions/program.h"
#include "engine/derived/aggregate_state.h"

namespace tally::derived {

// Family::start of a counter that waits for its backfill: no source transaction moves it.
inline constexpr int64_t kPendingStart = INT64_MAX;

// Whether a counter's groups are whole (see Backfill).
enum class CounterState : uint8_t {
  kCounting,     // every change counts: its groups equal its SELECT
  kPending,      // waits for its backfill: nothing moves it, it has no groups
  kBackfilling,  // its snapshot's rows are being applied: its groups are partial
};
// "counting", "pending", "backfilling".
std::string_view CounterStateName(CounterState state);

// One counter value of a read.
struct KeyValue {
  std::string key;    // canonical
  int64_t value = 0;  // what the key holds (aggregate_state.h for a counter that is not plain)
  // The group's value as reads show it, for a counter whose value is not that integer
  // (definitions::ShowsInteger false: a numeric sum, count(DISTINCT), min, max, avg,
  // several aggregates); empty otherwise.
  definitions::GroupValue shown = {};
};

// A page of a family listing.
struct Page {
  std::vector<KeyValue> items;
  std::string next_cursor;  // empty when this was the last page
  // The names of the counter's aggregates (AggregateColumn::name), when its value shows
  // several: the fields of each item's value.
  std::vector<std::string> names;
  uint64_t required_epoch = 0;
};

struct Family {
  explicit Family(definitions::CompiledCounter compiled)
      : counter(std::move(compiled)),
        states(counter.layout() == definitions::Layout::kPlain
                   ? nullptr
                   : std::make_unique<GroupStates>(counter)) {}
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  const definitions::CompiledCounter counter;

  // Source transactions at or below this position do not move the counter: 0 for most,
  // kPendingStart until a backfill activates it, then the backfill's consistent point.
  // Guarded by the apply lock (written exclusive, read shared).
  int64_t start = 0;
  // A "backfill/<name>" catalog record stands: activated, the snapshot's rows not all
  // applied yet. Cleared with release order once the backfill is complete, so that whoever
  // reads it false (acquire) sees every backfilled row applied.
  std::atomic<bool> backfilling{false};
  // kPending, kBackfilling or kCounting from `start` and `backfilling`. REQUIRES: the apply
  // lock held.
  CounterState state() const;

  // Bumped by every write that changes a group; a cached top-K of an older version may be
  // stale.
  std::atomic<uint64_t> version{0};

  std::mutex mutex;
  absl::btree_set<std::string> keys;  // guarded by mutex: the live groups, in byte order
  // With a retention: the live groups by the start of their time bucket, oldest first, so
  // that the sweep finds the expired ones without a scan. A group whose bucket is NULL has
  // no time and is never removed. Guarded by mutex.
  absl::btree_set<std::pair<int64_t, std::string>> by_bucket;
  struct TopEntry {
    uint64_t version = 0;
    int64_t computed_ms = 0;
    Page page;
  };
  // Top-K answers by (prefix, k); guarded by mutex.
  absl::flat_hash_map<std::string, TopEntry> top_cache;
  // The hidden records of a counter that is not plain (aggregate_state.h), mirrored; null for
  // a plain one. Guarded by mutex.
  const std::unique_ptr<GroupStates> states;

  // True when `key` is spelled as one of this counter's groups: its name alone when it has
  // no key columns (its one group), else its name, ':' and more (the parts, unchecked).
  bool IsGroupKey(std::string_view key) const;
  // The same as an error for the one who gave `key` (kInvalidArgument naming it).
  Status CheckGroupKey(std::string_view key) const;

  // Every insertion and removal of a live group goes through these, so that `keys` and
  // `by_bucket` agree. REQUIRES: mutex held.
  void AddKey(std::string_view key);
  // Also forgets the group's hidden records in `states`; whoever deletes a group's key
  // deletes its records with it (AppendRecordKeys, before).
  void RemoveKey(std::string_view key);
  // Appends the keys of the hidden records of group `key` (none for a plain counter).
  // REQUIRES: mutex held.
  void AppendRecordKeys(std::string_view key, std::vector<std::string>* out) const;
  // Empties the index, the top-K cache and the hidden records' mirror. REQUIRES: mutex held.
  void ClearKeys();
};

}  // namespace tally::derived
