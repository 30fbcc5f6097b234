// Persistence: the interface between the engine and a durable store. The engine (the
// committer and the derived layer) calls it; the storage layer implements it (RocksDbStore).
// This header and commit_batch.h are all that a store needs of the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/commit_batch.h"

namespace tally::engine {

// What a store reports about itself.
struct PersistenceStats {
  uint64_t log_bytes = 0;   // bytes of log written since the last checkpoint began
  uint64_t disk_bytes = 0;  // bytes of the store's tables
  // A checkpoint is due although no counter changed: the positions it would save moved far
  // enough (a cluster node's streams grow by renewals; saving lets them be trimmed).
  bool checkpoint_wanted = false;
};

// Where a loaded operation comes from: the store's tables (as of the last checkpoint), or
// its log (committed since; the next checkpoint must write it to the tables).
enum class LoadSource { kTables, kLog };

// Receives the stored state at start (see Persistence::Load).
class LoadVisitor {
 public:
  virtual ~LoadVisitor() = default;
  virtual void Put(std::string_view key, const CounterRecord& record, LoadSource source) = 0;
  virtual void Delete(std::string_view key, LoadSource source) = 0;
  virtual void ClearAll(LoadSource source) = 0;
};

// What the engine needs from a durable store. Implemented by the storage layer
// (RocksDbStore); the engine never sees how bytes reach the disk.
//
// Two paths. Commit() makes each batch durable at once, in a log. Checkpoints bring the
// store's tables up to date in the background, so that the log can be dropped:
//   BeginCheckpoint()    — between commits; later commits go to a new log segment
//   CheckpointWrite()... — any thread, while commits go on: counters' current values
//   FinishCheckpoint()   — once every commit the written values came from is durable;
//                          from now on recovery starts from these tables
// A checkpoint that never finishes changes nothing recovery depends on.
class Persistence {
 public:
  virtual ~Persistence() = default;

  // Threads. Commit() and BeginCheckpoint() run one at a time (the committer's
  // commit_mutex_). Sync() runs one at a time too (the committer's log_sync_mutex_, which
  // BeginCheckpoint() also holds), but may overlap one Commit() without `sync` on another
  // thread: the committer writes commit N+1 while N is fsync'd. The committer never commits
  // with `sync`; tests do, to write one batch durably.

  // Writes the whole batch atomically. With `sync`, returns only once the batch is on
  // stable storage (fsync'd), so that it survives a crash of the machine. The committer
  // writes without `sync` and calls Sync() (see above). A failed Commit may have written part
  // of the batch; writing the same batch again is harmless (its puts are absolute values).
  virtual Status Commit(const CommitBatch& batch, bool sync) = 0;

  // Makes every Commit() that returned before this call began durable against a machine
  // crash (fsync); cheap when nothing was written since the last Sync. After a failure
  // nothing is promised about what was written since the last successful Sync (the kernel
  // may have dropped those pages): the caller writes those batches again before it retries.
  virtual Status Sync() = 0;

  // Replays the stored state at start: every counter of the tables as a Put, in any order,
  // then the logged operations in commit order. A later operation supersedes an earlier.
  virtual Status Load(LoadVisitor& visitor) = 0;

  // REQUIRES: no Commit() or Sync() runs concurrently. Returns a token for FinishCheckpoint().
  virtual Result<uint64_t> BeginCheckpoint() = 0;
  // Writes the batch's operations to the tables (not durable until FinishCheckpoint).
  virtual Status CheckpointWrite(const CommitBatch& batch) = 0;
  virtual Status FinishCheckpoint(uint64_t token) = 0;
  // Called by the committer right after BeginCheckpoint() returned `token`, while it holds
  // every stripe of the keyspace (Keyspace::TakeCheckpoint's hook), so that no counter
  // changes meanwhile. A store that keeps stream positions beside the counters (the
  // cluster's: each partition's applied or assigned sequence) takes them here, a cut
  // consistent with the checkpoint's marks. Must be quick and must not call the engine.
  virtual void CheckpointCut([[maybe_unused]] uint64_t token) {}

  // Figures for INFO and metrics.
  virtual PersistenceStats stats() const { return {}; }

  // The catalog: a few small named records (counter definitions, source schemas) kept
  // beside the counters but outside the commit log, written rarely and read once at start.
  // WriteCatalog applies its operations atomically and returns once they are fsync'd; a
  // CatalogOp without a value deletes its record.
  struct CatalogOp {
    std::string name;
    std::optional<std::string> value;
  };
  virtual Status WriteCatalog(std::span<const CatalogOp> ops) = 0;
  // Every catalog record, ordered by name.
  virtual Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog() = 0;
};

}  // namespace tally::engine
