// RocksDbStore: tally's embedded durable store, in one directory:
//   <dir>/log/    the CommitLog: every commit, appended and (in sync mode) fdatasync'd
//   <dir>/tables/ a RocksDB database holding every counter as of the last checkpoint
//
// Why not write each commit into RocksDB directly: a million increments a second over a
// million keys turn into a million memtable inserts, flush sorts and compactions a second,
// which cost a whole core (measured; see docs/design.md). Instead the log makes each commit
// durable with one sequential write, and the engine's background checkpoints write each
// counter changed since the previous checkpoint once — N increments of a key in that
// interval cost one RocksDB write. Recovery loads the tables and replays the log segments
// written since the last finished checkpoint; records carry absolute values, so replaying
// one the tables already reflect is harmless.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/persistence.h"
#include "storage/commit_log.h"
#include "storage/table_format.h"

namespace rocksdb {
class DB;
}

namespace tally::storage {

struct RocksDbOptions {
  std::string path;                                      // the directory; created when missing
  size_t write_buffer_bytes = kDefaultWriteBufferBytes;  // RocksDB memtable
  size_t block_cache_bytes = 4 << 20;  // read cache; counters are read once, at start
};

class RocksDbStore final : public engine::Persistence {
 public:
  // kInvalidArgument when options.path holds a cluster node's store (ClusterTables).
  static Result<std::unique_ptr<RocksDbStore>> Open(const RocksDbOptions& options);
  ~RocksDbStore() override;

  // REQUIRES: Load() was called once before.
  Status Commit(const engine::CommitBatch& batch, bool sync) override;
  Status Sync() override;
  Status Load(engine::LoadVisitor& visitor) override;
  Result<uint64_t> BeginCheckpoint() override;
  Status CheckpointWrite(const engine::CommitBatch& batch) override;
  Status FinishCheckpoint(uint64_t token) override;
  engine::PersistenceStats stats() const override;
  Status WriteCatalog(std::span<const CatalogOp> ops) override;
  Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog() override;

 private:
  RocksDbStore(std::unique_ptr<rocksdb::DB> db, RocksDbOptions options);

  std::unique_ptr<rocksdb::DB> db_;
  const RocksDbOptions options_;
  const std::string log_dir_;
  // Commit and BeginCheckpoint one at a time, Sync one at a time and beside a Commit (see
  // engine/persistence.h; CommitLog takes the same rules).
  std::unique_ptr<CommitLog> log_;
  std::string encoded_;  // Commit's
  std::atomic<uint64_t> log_bytes_since_checkpoint_{0};
};

}  // namespace tally::storage
