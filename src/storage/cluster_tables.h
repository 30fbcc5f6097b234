// ClusterTables: a cluster node's local store (issue 13). In a cluster the partition streams
// are the log; these tables are a materialised view of the partitions the node holds, with
// the stream position each one reflects. No CommitLog: a restart loads the tables and reads
// each stream from its saved position on.
//
// Keys (storage/table_format.h has the encoding of values, the catalog and the layout):
//   'c' u16be(slot) key   := a counter; partition p's counters are one key range
//   'm' "pos" u16be(p)    := seq, term, writer (u64-le each): partition p's position, written
//                            only by FinishCheckpoint
//   'm' "ckpt_open"       := the partitions owned when the open checkpoint began (u32-le each)
//   'm' "node_id"         := 40 hex characters, drawn when the store is created
//   'm' "partitions"      := u32-le, the partition count the store was created with
//
// Why ckpt_open. A checkpoint writes counters' *current* values, without RocksDB's WAL, and
// RocksDB may flush part of them before the checkpoint finishes. An owner's current values
// may include commits not yet in its stream; should the node crash then, and the stream
// never receive them, the tables would keep values the stream does not have. So
// BeginCheckpoint records the owned partitions (synced) and FinishCheckpoint deletes the
// record in the same write as the positions; a record left over at start names the
// partitions whose tables must be rebuilt from their streams (RebuildPartition). Partitions
// only followed are safe: every value they hold came from the stream, and replaying it from
// the saved position overwrites them in order.
//
// Threads: one checkpoint at a time (BeginCheckpoint, CheckpointWrite..., FinishCheckpoint);
// BeginCheckpoint again (a claim adding its partition) and RebuildPartition (a partition
// lost) from other threads while one runs: each is one atomic RocksDB write, ordered by the
// caller (cluster_persistence.h: a partition rebuilt during a checkpoint is rebuilt again
// when it finishes). The loading calls and CloseOpenCheckpoint at start, before checkpoints
// run. The catalog may be written at any time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/commit_batch.h"
#include "engine/persistence.h"
#include "storage/stream_position.h"
#include "storage/table_format.h"

namespace rocksdb {
class DB;
class Snapshot;
}  // namespace rocksdb

namespace tally::storage {

struct ClusterTablesOptions {
  std::string path;              // the data directory; the tables are in <path>/tables
  uint32_t partition_count = 0;  // fixed when the store is created
  size_t write_buffer_bytes = kDefaultWriteBufferBytes;  // RocksDB memtable
  size_t block_cache_bytes = 4 << 20;
};

class ClusterTables;

// The tables as they were at one moment (a RocksDB snapshot), read while checkpoints go on:
// taken right after a checkpoint finished, each partition's counters and the position
// they were saved with (the counters may be newer than the position for a partition only
// followed, as after a restart; replaying the stream from the position makes them exact).
// Any thread. REQUIRES: the tables outlive the view.
class ClusterTablesView {
 public:
  ~ClusterTablesView();
  ClusterTablesView(const ClusterTablesView&) = delete;
  ClusterTablesView& operator=(const ClusterTablesView&) = delete;

  Result<StreamPosition> Position(uint32_t partition) const;
  // Calls visitor.Put for every counter of the partition, in key order.
  Status ReadPartition(uint32_t partition, engine::LoadVisitor& visitor) const;

 private:
  friend class ClusterTables;
  ClusterTablesView(const ClusterTables& tables, const rocksdb::Snapshot* snapshot)
      : tables_(tables), snapshot_(snapshot) {}

  const ClusterTables& tables_;
  const rocksdb::Snapshot* snapshot_;
};

class ClusterTables {
 public:
  // Opens or creates the store. kInvalidArgument when the directory holds a single-node
  // store or one created with another partition count; kIOError when RocksDB fails.
  // REQUIRES: 0 < partition_count <= kMaxPartitions.
  static Result<std::unique_ptr<ClusterTables>> Open(const ClusterTablesOptions& options);
  ~ClusterTables();
  ClusterTables(const ClusterTables&) = delete;
  ClusterTables& operator=(const ClusterTables&) = delete;

  // This node's identity, drawn when the store was created and kept with it.
  const std::string& node_id() const { return node_id_; }
  uint32_t partition_count() const { return partition_count_; }

  // Every counter, as a Put from the tables (keys without their slot), in slot order.
  Status LoadCounters(engine::LoadVisitor& visitor);
  // Every partition's position (index = partition); {} for a partition never checkpointed.
  Result<std::vector<StreamPosition>> ReadPositions();
  // The partitions a checkpoint that never finished had begun with; nullopt when none.
  Result<std::optional<std::vector<uint32_t>>> ReadOpenCheckpoint();

  // Records `owned` as the open checkpoint's partitions, synced.
  Status BeginCheckpoint(std::span<const uint32_t> owned);
  // Writes counters (without the WAL: durable at FinishCheckpoint). clear_all() empties
  // every partition first.
  Status CheckpointWrite(const engine::CommitBatch& batch);
  // Writes every partition's position (index = partition) and deletes the open checkpoint's
  // record in one write, then flushes: from now on a start loads these tables.
  // REQUIRES: positions.size() == partition_count().
  Status FinishCheckpoint(std::span<const StreamPosition> positions);
  // Deletes the partition's counters and sets its position to {}, in one synced write: the
  // partition is then read again from its stream's start. REQUIRES: partition <
  // partition_count().
  Status RebuildPartition(uint32_t partition);
  // Forgets the open checkpoint (synced), once every partition it named was rebuilt.
  Status CloseOpenCheckpoint();

  // The tables as they are now, to read later (see ClusterTablesView).
  std::unique_ptr<ClusterTablesView> Pin() const;

  // Bytes of the tables on disk.
  uint64_t disk_bytes() const;

  Status WriteCatalog(std::span<const engine::Persistence::CatalogOp> ops);
  Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog();

 private:
  friend class ClusterTablesView;
  ClusterTables(std::unique_ptr<rocksdb::DB> db, uint32_t partition_count, std::string node_id);

  std::unique_ptr<rocksdb::DB> db_;
  const uint32_t partition_count_;
  const std::string node_id_;
};

// The key a counter is stored under: 'c', its slot (u16 big endian), the key itself.
std::string ClusterCounterKey(std::string_view key);

}  // namespace tally::storage
