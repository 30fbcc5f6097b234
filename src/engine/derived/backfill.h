// Backfill: the state of a counter created while its source's change stream is followed,
// from pending to counting.
//
// Why. A counter created on a server that already counts a source would start at zero
// and count only what changes from then on; its SELECT over the database would not match.
// It must first be given the rows that exist, from a snapshot of the database that lines
// up exactly with a position of the stream, without counting any change twice or missing
// one in between.
//
// How. MarkStreamed(s) says that source s is fed by a change stream: from then on a CREATE
// COUNTER on s makes the counter *pending* (catalog record "start/<name>" = "pending",
// Family::start = kPendingStart): no change moves it. The stream's runner (sources/
// postgres) takes a fresh snapshot whose consistent point is C and activates the counter
// at C (Activate): source transactions at or below C skip it (the snapshot holds them),
// those above count, while the snapshot's rows are applied to it alone (the facade's
// ApplyBackfill); Finish marks it complete. Between Activate and Finish a "backfill/<name>"
// record stands; after a crash, RedoInterrupted (at Load) deletes the counter's groups and
// makes it pending again, so a backfill is always done whole. A counter created before
// its source is streamed, or on a source that is not, starts at 0 and counts every change.
//
// Callers: DerivedCounters, for the PostgreSQL source's runner (sources/postgres) and, for
// RedoInterrupted, Load.
//
// Thread-safety. The streamed sources and every Family::start are guarded by DerivedCounters'
// apply lock (derived_counters.h): MarkStreamed, MarkEverySourceStreamed, Activate,
// ResetCounter, ResetSource and RedoInterrupted REQUIRE it held exclusively (no apply sees
// a start change mid-batch); IsStreamed and PendingCounters REQUIRE it held. Finish needs
// no lock: it clears an atomic flag after its record is durable.
//
// Errors: the store's, when a catalog record cannot be written (then the state in memory
// is unchanged); kInvalidArgument from Activate for a counter that is not pending.
#pragma once

#include <absl/container/flat_hash_set.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/derived/catalog_snapshot.h"
#include "engine/derived/derived_keyspace.h"
#include "engine/persistence.h"

namespace tally::derived {

class Backfill {
 public:
  // `store` and `keyspace` must outlive this object.
  Backfill(engine::Persistence& store, DerivedKeyspace& keyspace)
      : store_(store), keyspace_(keyspace) {}

  // From now on a counter created on `source` (or, for the second, on any source) is
  // pending. Not durable: the runner says it again at every start.
  void MarkStreamed(std::string_view source);
  void MarkEverySourceStreamed();
  // MarkStreamed(source) or MarkEverySourceStreamed() was called.
  bool IsStreamed(std::string_view source) const;

  // The pending counters of `source`, by name.
  std::vector<std::string> PendingCounters(const SourceEntry& source) const;

  // Activates pending `family` at consistent point `position`: false (nothing done) when
  // the position recorded for its source is already past it (a transaction above it may
  // have been applied without the counter: reset it and retry with a new snapshot); else
  // the start and the "backfill/" record are durable and the counter is backfilling.
  Result<bool> Activate(Family& family, int64_t position);
  // Removes the "backfill/" record of counter `name` and then clears `family`'s
  // backfilling flag (`family` may be null: the counter is gone). Durable when it returns.
  Status Finish(std::string_view name, Family* family);

  // Deletes every group of `family` and makes it pending again (when its source is
  // streamed; else it counts from 0). Durable when it returns.
  Status ResetCounter(Family& family);
  // Deletes every group of every counter on `source` and its position record; each
  // counter counts from 0 again (the caller's backfill counts them all, pending ones too).
  // Durable when it returns.
  Status ResetSource(const SourceEntry& source);
  // The state changes of ResetCounter and ResetSource without the deletes (a cluster
  // deletes a counter's groups partition by partition: DerivedCounters::ResetShares).
  // Durable when they return.
  Status ResetState(Family& family);
  Status ResetStates(const SourceEntry& source);
  // Load's part: the counters whose backfill a crash interrupted lose their groups and
  // are pending again. Durable when it returns.
  Status RedoInterrupted(std::span<const std::shared_ptr<Family>> families);

 private:
  engine::Persistence& store_;
  DerivedKeyspace& keyspace_;
  absl::flat_hash_set<std::string> streamed_;  // guarded by the apply lock
  bool every_source_streamed_ = false;         // guarded by the apply lock
};

}  // namespace tally::derived
