// RetentionSweeper: removes the time buckets of counters defined WITH (retention = ...)
// once they are past retention.
//
// A counter with a retention keeps a time bucket (its one date_trunc key column) while any
// instant of it is within the retention of now, by the engine's clock: a bucket goes once
// its end is at or before now - retention (definitions::BucketExpired). A sweep deletes
// expired groups through ordinary keyspace deletes, so the committer makes the removal
// durable, and drops them from the family index. The family's index by bucket start
// (family.h) hands it the oldest groups first, so a sweep costs what it removes. The apply
// path (apply.h) never brings a swept bucket back: it skips a late change's increment for
// an expired bucket.
//
// Callers: DerivedCounters::SweepRetention, at Load and then on the sweeper's thread.
// No errors: a sweep removes what it can and says how much.
//
// Thread-safety. Sweeps run one at a time (an internal mutex, which also guards the turn).
// REQUIRES: the caller holds DerivedCounters' apply lock (shared) for the call, so that
// no DDL changes the families meanwhile, and `catalog` is a snapshot taken under it. A
// sweep takes a family's index mutex alone to find expired groups, then a View of their
// keys and, inside it, the index mutex again: never a View while an index mutex is held.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "engine/derived/catalog_snapshot.h"
#include "engine/keyspace.h"

namespace tally::derived {

class RetentionSweeper {
 public:
  // `keyspace` must outlive the sweeper.
  explicit RetentionSweeper(engine::Keyspace& keyspace) : keyspace_(keyspace) {}

  struct Swept {
    size_t removed = 0;           // groups removed
    uint64_t required_epoch = 0;  // the removal is durable once this epoch is
  };
  // Removes up to `budget` expired groups. Within a counter the oldest buckets go first;
  // the counters with a retention are taken in turn (by name), starting after the one
  // the previous sweep last removed from, so that one with more expired groups than the
  // budget does not starve the others. Not durable when it returns: wait for the epoch.
  Swept Sweep(const CatalogSnapshot& catalog, size_t budget);

 private:
  engine::Keyspace& keyspace_;
  std::mutex mutex_;         // one Sweep at a time
  std::string sweep_after_;  // guarded by mutex_: the family last swept from
};

}  // namespace tally::derived
