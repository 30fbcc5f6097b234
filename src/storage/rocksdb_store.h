// RocksDbStore: tally's embedded durable store, in one directory:
//   <dir>/log/    the CommitLog: every commit, appended and (in sync mode) fdatasync'd
//   <dir>/tables/ a RocksDB database holding every counter as of the last checkpoint
//
// Why not write each commit into RocksDB directly: a commit at a million increments a
// second over a million keys turns into a million memtable inserts, flush sorts and
// compactions a second, which cost a whole core (measured; see the README). Instead the
// log makes each commit durable with one sequential write, and a background checkpoint
// writes each key changed since the previous one once — N increments of a key in that
// interval cost one RocksDB write. Recovery loads the tables and replays the log segments
// written since the last checkpoint; records carry absolute values, so replaying a record
// the tables already hold is harmless.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <absl/container/flat_hash_map.h>

#include "core/status.h"
#include "engine/commit_batch.h"
#include "storage/commit_log.h"

namespace rocksdb {
class DB;
}

namespace tally::storage {

struct RocksDbOptions {
  std::string path;                           // the directory; created when missing
  size_t write_buffer_bytes = 16 << 20;       // RocksDB memtable; default 16 MiB
  size_t block_cache_bytes = 8 << 20;         // read cache; counters are read once, at start
  int checkpoint_interval_ms = 10000;         // checkpoint at least this often (when changed)
  size_t checkpoint_max_keys = 2'000'000;     // ... or once this many distinct keys changed
  uint64_t checkpoint_max_log_bytes = 256 << 20;  // ... or once the log segment is this big
};

class RocksDbStore final : public engine::Persistence {
 public:
  static Result<std::unique_ptr<RocksDbStore>> Open(const RocksDbOptions& options);
  // Writes a last checkpoint (so the next start replays nothing) and closes.
  ~RocksDbStore() override;

  // REQUIRES: Load() was called once before.
  Status Commit(const engine::CommitBatch& batch, bool sync) override;
  Status Sync() override;
  Status Load(engine::LoadVisitor& visitor) override;
  void Maintain() override;
  engine::PersistenceStats stats() const override;

  // Checkpoints everything committed so far and waits for it. For tests and tools.
  Status CheckpointNow();

 private:
  // Changes since the last checkpoint, coalesced per key: clear first, then these.
  struct Changes {
    bool clear_all = false;
    absl::flat_hash_map<std::string, std::optional<engine::CounterRecord>> keys;  // nullopt = delete
  };
  class ChangeCollector;

  RocksDbStore(std::unique_ptr<rocksdb::DB> db, RocksDbOptions options);
  void Merge(const engine::CommitBatch& batch);
  bool CheckpointDue() const;
  // Rotates the log and hands the collected changes to the checkpoint thread.
  void StartCheckpoint();
  void CheckpointLoop();
  Status WriteCheckpoint(const Changes& changes, uint64_t log_start);

  std::unique_ptr<rocksdb::DB> db_;
  const RocksDbOptions options_;
  const std::string log_dir_;
  std::unique_ptr<CommitLog> log_;  // committer thread only (after Load)
  Changes changes_;                 // committer thread only
  std::string encoded_;             // committer thread only
  std::chrono::steady_clock::time_point last_checkpoint_start_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<std::pair<Changes, uint64_t>> job_;  // guarded by mutex_: changes, log start
  std::optional<Changes> failed_;                    // guarded by mutex_: to fold back in
  bool checkpoint_running_ = false;                  // guarded by mutex_
  bool stopping_ = false;                            // guarded by mutex_
  engine::PersistenceStats stats_;                   // guarded by mutex_
  std::thread checkpointer_;
};

}  // namespace tally::storage
