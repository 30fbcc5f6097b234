// What the single-node store keeps in RocksDB (storage/table_format.h has the rest):
//
//   counter key     := 'c' user-key-bytes
//   'm' "log_start" := segment:u64-le   the first log segment not covered by the tables
//
// FLUSHALL deletes the range ['c', 'd'). RocksDB's own WAL is off for counters: the tables
// are written only by checkpoints, whose durability is RocksDB's flush, and the CommitLog covers
// everything after the last completed one.
#include "storage/rocksdb_store.h"

#include <rocksdb/db.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>

#include "storage/commit_record.h"
#include "storage/table_format.h"

namespace tally::storage {
namespace {

const std::string kLogStartKey = std::string(1, kMetaPrefix) + "log_start";

std::string CounterKey(std::string_view key) {
  std::string encoded(1, kCounterPrefix);
  encoded.append(key);
  return encoded;
}

}  // namespace

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const RocksDbOptions& options) {
  auto db =
      OpenTables({options.path + "/tables", options.write_buffer_bytes, options.block_cache_bytes},
                 TableLayout::kSingleNode);
  if (!db) return tl::unexpected(db.error());
  return std::unique_ptr<RocksDbStore>(new RocksDbStore(std::move(*db), options));
}

RocksDbStore::RocksDbStore(std::unique_ptr<rocksdb::DB> db, RocksDbOptions options)
    : db_(std::move(db)), options_(std::move(options)), log_dir_(options_.path + "/log") {}

RocksDbStore::~RocksDbStore() {
  log_.reset();
  db_->Close();
}

Status RocksDbStore::Load(engine::LoadVisitor& visitor) {
  uint64_t log_start = 1;
  std::string stored;
  if (db_->Get(rocksdb::ReadOptions(), kLogStartKey, &stored).ok() && stored.size() == 8) {
    std::memcpy(&log_start, stored.data(), 8);
  }

  if (auto status = LoadCounterTables(*db_, 1, visitor); !status) return status;

  std::error_code error;
  std::filesystem::create_directories(log_dir_, error);
  uint64_t records = 0;
  auto newest = CommitLog::Replay(log_dir_, log_start, [&](std::string_view payload) {
    ++records;
    return DecodeCommit(payload, visitor);
  });
  if (!newest) return tl::unexpected(newest.error());
  if (records > 0) spdlog::info("replayed {} commits from the log", records);
  auto log = CommitLog::Create(log_dir_, std::max(*newest, log_start - 1) + 1);
  if (!log) return tl::unexpected(log.error());
  log_ = std::move(*log);
  log_->DropBefore(log_start);
  return OkStatus();
}

Status RocksDbStore::Commit(const engine::CommitBatch& batch, bool sync) {
  EncodeCommit(batch, &encoded_);
  if (auto status = log_->Append(encoded_, sync); !status) return status;
  log_bytes_since_checkpoint_.fetch_add(encoded_.size() + 8, std::memory_order_relaxed);
  return OkStatus();
}

Status RocksDbStore::Sync() { return log_->Sync(); }

Result<uint64_t> RocksDbStore::BeginCheckpoint() {
  auto next = log_->Rotate();
  if (next) log_bytes_since_checkpoint_.store(0, std::memory_order_relaxed);
  return next;
}

Status RocksDbStore::CheckpointWrite(const engine::CommitBatch& batch) {
  // No RocksDB WAL: these writes become durable by the flush in FinishCheckpoint, and
  // until then the commit log covers everything they hold.
  return WriteCheckpointBatch(*db_, batch, &CounterKey);
}

Status RocksDbStore::FinishCheckpoint(uint64_t token) {
  char start[8];
  std::memcpy(start, &token, 8);
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = true;
  if (auto status = FromRocks(db_->Put(write_options, kLogStartKey, rocksdb::Slice(start, 8)),
                              "checkpoint mark");
      !status) {
    return status;
  }
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (auto status = FromRocks(db_->Flush(flush), "checkpoint flush"); !status) return status;
  CommitLog::DropSegmentsBefore(log_dir_, token);
  return OkStatus();
}

engine::PersistenceStats RocksDbStore::stats() const {
  engine::PersistenceStats stats;
  stats.log_bytes = log_bytes_since_checkpoint_.load(std::memory_order_relaxed);
  uint64_t bytes = 0;
  db_->GetIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize, &bytes);
  stats.disk_bytes = bytes;
  return stats;
}

Status RocksDbStore::WriteCatalog(std::span<const CatalogOp> ops) {
  return storage::WriteCatalog(*db_, ops);
}

Result<std::vector<std::pair<std::string, std::string>>> RocksDbStore::ReadCatalog() {
  return storage::ReadCatalog(*db_);
}

}  // namespace tally::storage
