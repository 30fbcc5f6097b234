#include "storage/cluster_tables.h"

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cstring>
#include <random>

#include "core/slot.h"
#include "storage/table_format.h"

namespace tally::storage {
namespace {

const std::string kPositionPrefix = std::string(1, kMetaPrefix) + "pos";
const std::string kOpenCheckpointKey = std::string(1, kMetaPrefix) + "ckpt_open";
const std::string kNodeIdKey = std::string(1, kMetaPrefix) + "node_id";
const std::string kPartitionsKey = std::string(1, kMetaPrefix) + "partitions";

void AppendU16Be(std::string* out, uint32_t value) {
  out->push_back(static_cast<char>((value >> 8) & 0xff));
  out->push_back(static_cast<char>(value & 0xff));
}

// 'c' u16be(slot): the first key of a slot's counters; `slot` may be kSlotCount (the end).
std::string SlotKey(uint32_t slot) {
  std::string key(1, kCounterPrefix);
  AppendU16Be(&key, slot);
  return key;
}

std::string PositionKey(uint32_t partition) {
  std::string key = kPositionPrefix;
  AppendU16Be(&key, partition);
  return key;
}

std::string EncodePosition(const StreamPosition& position) {
  std::string bytes(24, '\0');
  std::memcpy(bytes.data(), &position.seq, 8);
  std::memcpy(bytes.data() + 8, &position.term, 8);
  std::memcpy(bytes.data() + 16, &position.writer, 8);
  return bytes;
}

// Partition p's saved position, {} when it has none.
Result<StreamPosition> ReadPosition(rocksdb::DB& db, uint32_t partition,
                                    const rocksdb::Snapshot* snapshot);

std::string NewNodeId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 5; ++i) id += fmt::format("{:08x}", static_cast<uint32_t>(random()));
  return id;
}

// Reads `key`; nullopt when it is missing.
Result<std::optional<std::string>> Get(rocksdb::DB& db, const std::string& key,
                                       const rocksdb::Snapshot* snapshot = nullptr) {
  std::string value;
  rocksdb::ReadOptions read_options;
  read_options.snapshot = snapshot;
  const rocksdb::Status status = db.Get(read_options, key, &value);
  if (status.IsNotFound()) return std::nullopt;
  if (auto checked = FromRocks(status, "metadata read"); !checked) {
    return tl::unexpected(checked.error());
  }
  return value;
}

// The node id and partition count of the store, recorded (synced) when it is new.
Result<std::string> Identify(rocksdb::DB& db, uint32_t partition_count, const std::string& path) {
  auto node_id = Get(db, kNodeIdKey);
  if (!node_id) return tl::unexpected(node_id.error());
  auto partitions = Get(db, kPartitionsKey);
  if (!partitions) return tl::unexpected(partitions.error());
  if (*node_id && *partitions) {
    uint32_t stored = 0;
    if ((*partitions)->size() != 4 || (*node_id)->size() != 40) {
      return Corruption(fmt::format("the cluster store in {} has a damaged identity", path));
    }
    std::memcpy(&stored, (*partitions)->data(), 4);
    if (stored != partition_count) {
      return InvalidArgument(
          fmt::format("the cluster store in {} was created for {} partitions, not {}", path, stored,
                      partition_count));
    }
    return **node_id;
  }
  const std::string id = NewNodeId();
  rocksdb::WriteBatch batch;
  batch.Put(kNodeIdKey, id);
  batch.Put(kPartitionsKey, rocksdb::Slice(reinterpret_cast<const char*>(&partition_count), 4));
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  if (auto written = FromRocks(db.Write(write_options, &batch), "identity write"); !written) {
    return tl::unexpected(written.error());
  }
  return id;
}

Result<StreamPosition> ReadPosition(rocksdb::DB& db, uint32_t partition,
                                    const rocksdb::Snapshot* snapshot) {
  auto stored = Get(db, PositionKey(partition), snapshot);
  if (!stored) return tl::unexpected(stored.error());
  StreamPosition position;
  if (!*stored) return position;
  if ((*stored)->size() != 24) {
    return Corruption(
        fmt::format("the position of partition {} has {} bytes", partition, (*stored)->size()));
  }
  std::memcpy(&position.seq, (*stored)->data(), 8);
  std::memcpy(&position.term, (*stored)->data() + 8, 8);
  std::memcpy(&position.writer, (*stored)->data() + 16, 8);
  return position;
}

}  // namespace

std::string ClusterCounterKey(std::string_view key) {
  std::string encoded = SlotKey(KeySlot(key));
  encoded.append(key);
  return encoded;
}

Result<std::unique_ptr<ClusterTables>> ClusterTables::Open(const ClusterTablesOptions& options) {
  if (options.partition_count == 0 || options.partition_count > kMaxPartitions) {
    return InvalidArgument(fmt::format("{} partitions: a cluster has 1 to {}",
                                       options.partition_count, kMaxPartitions));
  }
  auto db =
      OpenTables({options.path + "/tables", options.write_buffer_bytes, options.block_cache_bytes},
                 TableLayout::kCluster);
  if (!db) return tl::unexpected(db.error());
  auto node_id = Identify(**db, options.partition_count, options.path);
  if (!node_id) return tl::unexpected(node_id.error());
  return std::unique_ptr<ClusterTables>(
      new ClusterTables(std::move(*db), options.partition_count, std::move(*node_id)));
}

ClusterTables::ClusterTables(std::unique_ptr<rocksdb::DB> db, uint32_t partition_count,
                             std::string node_id)
    : db_(std::move(db)), partition_count_(partition_count), node_id_(std::move(node_id)) {}

ClusterTables::~ClusterTables() { db_->Close(); }

Status ClusterTables::LoadCounters(engine::LoadVisitor& visitor) {
  return LoadCounterTables(*db_, 3, visitor);  // 'c' u16be(slot)
}

Result<std::vector<StreamPosition>> ClusterTables::ReadPositions() {
  std::vector<StreamPosition> positions(partition_count_);
  for (uint32_t p = 0; p < partition_count_; ++p) {
    auto position = ReadPosition(*db_, p, nullptr);
    if (!position) return tl::unexpected(position.error());
    positions[p] = *position;
  }
  return positions;
}

Result<std::optional<std::vector<uint32_t>>> ClusterTables::ReadOpenCheckpoint() {
  auto stored = Get(*db_, kOpenCheckpointKey);
  if (!stored) return tl::unexpected(stored.error());
  if (!*stored) return std::nullopt;
  if ((*stored)->size() % 4 != 0) {
    return Corruption(fmt::format("the open checkpoint's record has {} bytes", (*stored)->size()));
  }
  std::vector<uint32_t> partitions((*stored)->size() / 4);
  std::memcpy(partitions.data(), (*stored)->data(), (*stored)->size());
  for (uint32_t p : partitions) {
    if (p >= partition_count_) {
      return Corruption(fmt::format("the open checkpoint names partition {}", p));
    }
  }
  return partitions;
}

Status ClusterTables::BeginCheckpoint(std::span<const uint32_t> owned) {
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  return FromRocks(db_->Put(write_options, kOpenCheckpointKey,
                            rocksdb::Slice(reinterpret_cast<const char*>(owned.data()),
                                           owned.size() * sizeof(uint32_t))),
                   "checkpoint begin");
}

Status ClusterTables::CheckpointWrite(const engine::CommitBatch& batch) {
  // No WAL: durable by the flush in FinishCheckpoint; until then the streams cover them.
  return WriteCheckpointBatch(*db_, batch, &ClusterCounterKey);
}

Status ClusterTables::FinishCheckpoint(std::span<const StreamPosition> positions) {
  if (positions.size() != partition_count_) {
    return InvalidArgument(
        fmt::format("{} positions for {} partitions", positions.size(), partition_count_));
  }
  // Without the WAL, like the counters: the positions and the deletion of ckpt_open become
  // durable with them, at the flush. A crash before the flush ends leaves ckpt_open (it was
  // written with the WAL) and the previous positions.
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = true;
  rocksdb::WriteBatch write_batch;
  for (uint32_t p = 0; p < partition_count_; ++p) {
    write_batch.Put(PositionKey(p), EncodePosition(positions[p]));
  }
  write_batch.Delete(kOpenCheckpointKey);
  if (auto status = FromRocks(db_->Write(write_options, &write_batch), "checkpoint mark");
      !status) {
    return status;
  }
  rocksdb::FlushOptions flush;
  flush.wait = true;
  return FromRocks(db_->Flush(flush), "checkpoint flush");
}

Status ClusterTables::RebuildPartition(uint32_t partition) {
  if (partition >= partition_count_) {
    return InvalidArgument(fmt::format("partition {} of {}", partition, partition_count_));
  }
  const SlotRange slots = PartitionSlots(partition, partition_count_);
  rocksdb::WriteBatch write_batch;
  write_batch.DeleteRange(SlotKey(slots.first), SlotKey(slots.last + 1));
  write_batch.Put(PositionKey(partition), EncodePosition({}));
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  return FromRocks(db_->Write(write_options, &write_batch), "partition rebuild");
}

Status ClusterTables::CloseOpenCheckpoint() {
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  return FromRocks(db_->Delete(write_options, kOpenCheckpointKey), "checkpoint close");
}

std::unique_ptr<ClusterTablesView> ClusterTables::Pin() const {
  return std::unique_ptr<ClusterTablesView>(new ClusterTablesView(*this, db_->GetSnapshot()));
}

ClusterTablesView::~ClusterTablesView() { tables_.db_->ReleaseSnapshot(snapshot_); }

Result<StreamPosition> ClusterTablesView::Position(uint32_t partition) const {
  if (partition >= tables_.partition_count_) {
    return InvalidArgument(fmt::format("partition {} of {}", partition, tables_.partition_count_));
  }
  return ReadPosition(*tables_.db_, partition, snapshot_);
}

Status ClusterTablesView::ReadPartition(uint32_t partition, engine::LoadVisitor& visitor) const {
  if (partition >= tables_.partition_count_) {
    return InvalidArgument(fmt::format("partition {} of {}", partition, tables_.partition_count_));
  }
  const SlotRange slots = PartitionSlots(partition, tables_.partition_count_);
  return LoadCounterRange(*tables_.db_, 3, SlotKey(slots.first), SlotKey(slots.last + 1), snapshot_,
                          visitor);
}

uint64_t ClusterTables::disk_bytes() const {
  uint64_t bytes = 0;
  db_->GetIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize, &bytes);
  return bytes;
}

Status ClusterTables::WriteCatalog(std::span<const engine::Persistence::CatalogOp> ops) {
  return storage::WriteCatalog(*db_, ops);
}

Result<std::vector<std::pair<std::string, std::string>>> ClusterTables::ReadCatalog() {
  return storage::ReadCatalog(*db_);
}

}  // namespace tally::storage
