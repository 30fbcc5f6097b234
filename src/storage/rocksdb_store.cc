// What tally keeps in RocksDB (one column family, keys by prefix):
//
//   counter key   := 'c' user-key-bytes
//   counter value := value:int64-le [deadline-ms:int64-le]   (deadline only when it expires)
//   'm' "log_start" := segment:u64-le   the first log segment not covered by the tables
//
// FLUSHALL deletes the range ['c', 'd'). RocksDB's own WAL is off: the tables are written
// only by checkpoints, whose durability is RocksDB's flush, and the CommitLog covers
// everything after the last completed one.
#include "storage/rocksdb_store.h"

#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include "storage/commit_record.h"

namespace tally::storage {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr char kCounterPrefix = 'c';
constexpr char kCounterPrefixEnd = 'd';
const std::string kLogStartKey = "mlog_start";
constexpr size_t kCheckpointChunk = 10000;  // operations per RocksDB write

Status FromRocks(const rocksdb::Status& status, std::string_view what) {
  if (status.ok()) return OkStatus();
  return IOError(fmt::format("{}: {}", what, status.ToString()));
}

std::string CounterKey(std::string_view key) {
  std::string encoded(1, kCounterPrefix);
  encoded.append(key);
  return encoded;
}

}  // namespace

// Forwards replayed log records to the engine and collects them for the next checkpoint,
// so that the segments they came from can be dropped once it completes.
class RocksDbStore::ChangeCollector final : public engine::LoadVisitor {
 public:
  ChangeCollector(engine::LoadVisitor& next, Changes& changes) : next_(next), changes_(changes) {}
  void Put(std::string_view key, const engine::CounterRecord& record) override {
    next_.Put(key, record);
    changes_.keys[std::string(key)] = record;
  }
  void Delete(std::string_view key) override {
    next_.Delete(key);
    changes_.keys[std::string(key)] = std::nullopt;
  }
  void ClearAll() override {
    next_.ClearAll();
    changes_.clear_all = true;
    changes_.keys.clear();
  }

 private:
  engine::LoadVisitor& next_;
  Changes& changes_;
};

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const RocksDbOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(options.path, error);
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.write_buffer_size = options.write_buffer_bytes;
  db_options.max_write_buffer_number = 2;
  db_options.IncreaseParallelism(2);
  // The tables are never point-read (counters live in memory and are read from here once,
  // in order, at start), so an append-only vector memtable fits: an insert is an append
  // instead of a skip-list search, and the sort happens once, at flush.
  db_options.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  db_options.allow_concurrent_memtable_write = false;
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));

  rocksdb::DB* raw = nullptr;
  const std::string tables = options.path + "/tables";
  const rocksdb::Status status = rocksdb::DB::Open(db_options, tables, &raw);
  if (!status.ok()) {
    return IOError(fmt::format("cannot open the store in {}: {}", tables, status.ToString()));
  }
  return std::unique_ptr<RocksDbStore>(
      new RocksDbStore(std::unique_ptr<rocksdb::DB>(raw), options));
}

RocksDbStore::RocksDbStore(std::unique_ptr<rocksdb::DB> db, RocksDbOptions options)
    : db_(std::move(db)),
      options_(std::move(options)),
      log_dir_(options_.path + "/log"),
      last_checkpoint_start_(SteadyClock::now()) {
  checkpointer_ = std::thread([this] { CheckpointLoop(); });
}

RocksDbStore::~RocksDbStore() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  checkpointer_.join();
  if (log_ != nullptr && (changes_.clear_all || !changes_.keys.empty() || failed_)) {
    // A last checkpoint, here on the closing thread, so that the next start is quick.
    if (failed_) {
      for (auto& [key, record] : failed_->keys) changes_.keys.try_emplace(key, record);
      changes_.clear_all = changes_.clear_all || failed_->clear_all;
    }
    if (auto next = log_->Rotate(); next) {
      if (auto status = WriteCheckpoint(changes_, *next); !status) {
        spdlog::error("final checkpoint failed (the log still holds everything): {}",
                      status.error().message);
      }
    }
  }
  log_.reset();
  db_->Close();
}

Status RocksDbStore::Load(engine::LoadVisitor& visitor) {
  uint64_t log_start = 1;
  std::string stored;
  if (db_->Get(rocksdb::ReadOptions(), kLogStartKey, &stored).ok() && stored.size() == 8) {
    std::memcpy(&log_start, stored.data(), 8);
  }

  rocksdb::ReadOptions read_options;
  read_options.fill_cache = false;
  const std::string upper(1, kCounterPrefixEnd);
  rocksdb::Slice upper_bound(upper);
  read_options.iterate_upper_bound = &upper_bound;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options));
  for (it->Seek(std::string(1, kCounterPrefix)); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    const rocksdb::Slice value = it->value();
    if (value.size() != 8 && value.size() != 16) {
      return Corruption(fmt::format("counter record of {} bytes under key '{}'", value.size(),
                                    key.ToString(true)));
    }
    engine::CounterRecord record;
    std::memcpy(&record.value, value.data(), 8);
    if (value.size() == 16) std::memcpy(&record.deadline_ms, value.data() + 8, 8);
    visitor.Put(std::string_view(key.data() + 1, key.size() - 1), record);
  }
  if (auto status = FromRocks(it->status(), "load"); !status) return status;
  it.reset();

  std::error_code error;
  std::filesystem::create_directories(log_dir_, error);
  ChangeCollector collector(visitor, changes_);
  uint64_t records = 0;
  auto newest = CommitLog::Replay(log_dir_, log_start, [&](std::string_view payload) {
    ++records;
    return DecodeCommit(payload, collector);
  });
  if (!newest) return tl::unexpected(newest.error());
  if (records > 0) spdlog::info("replayed {} commits from the log", records);
  auto log = CommitLog::Create(log_dir_, std::max(*newest, log_start - 1) + 1);
  if (!log) return tl::unexpected(log.error());
  log_ = std::move(*log);
  log_->DropBefore(log_start);
  return OkStatus();
}

void RocksDbStore::Merge(const engine::CommitBatch& batch) {
  if (batch.clear_all()) {
    changes_.clear_all = true;
    changes_.keys.clear();
  }
  for (size_t i = 0; i < batch.delete_count(); ++i) {
    changes_.keys[std::string(batch.delete_key(i))] = std::nullopt;
  }
  for (size_t i = 0; i < batch.put_count(); ++i) {
    changes_.keys[std::string(batch.put_key(i))] = batch.put_record(i);
  }
}

Status RocksDbStore::Commit(const engine::CommitBatch& batch, bool sync) {
  EncodeCommit(batch, &encoded_);
  if (auto status = log_->Append(encoded_, sync); !status) return status;
  Merge(batch);
  if (CheckpointDue()) StartCheckpoint();
  return OkStatus();
}

Status RocksDbStore::Sync() { return log_->Sync(); }

void RocksDbStore::Maintain() {
  if (log_ != nullptr && CheckpointDue()) StartCheckpoint();
}

bool RocksDbStore::CheckpointDue() const {
  if (!changes_.clear_all && changes_.keys.empty()) return false;
  return changes_.keys.size() >= options_.checkpoint_max_keys ||
         log_->segment_bytes() >= options_.checkpoint_max_log_bytes ||
         SteadyClock::now() - last_checkpoint_start_ >=
             std::chrono::milliseconds(options_.checkpoint_interval_ms);
}

void RocksDbStore::StartCheckpoint() {
  std::unique_lock lock(mutex_);
  if (checkpoint_running_ || job_) return;  // one at a time; the next commit asks again
  if (failed_) {
    // Fold a failed checkpoint's changes back in, under the newer ones.
    if (!changes_.clear_all) {
      for (auto& [key, record] : failed_->keys) changes_.keys.try_emplace(key, record);
      changes_.clear_all = failed_->clear_all;
    }
    failed_.reset();
  }
  lock.unlock();
  auto next = log_->Rotate();
  if (!next) {
    spdlog::error("cannot start a checkpoint: {}", next.error().message);
    return;
  }
  last_checkpoint_start_ = SteadyClock::now();
  lock.lock();
  job_.emplace(std::move(changes_), *next);
  changes_ = Changes();
  lock.unlock();
  wake_.notify_all();
}

void RocksDbStore::CheckpointLoop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || job_.has_value(); });
    if (!job_) return;  // stopping, nothing to do: the destructor writes the last one
    auto [changes, log_start] = std::move(*job_);
    job_.reset();
    checkpoint_running_ = true;
    lock.unlock();
    const auto started = SteadyClock::now();
    auto status = WriteCheckpoint(changes, log_start);
    const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(
                            SteadyClock::now() - started)
                            .count();
    lock.lock();
    checkpoint_running_ = false;
    if (status) {
      stats_.checkpoints++;
      stats_.last_checkpoint_ms = static_cast<uint64_t>(millis);
    } else {
      stats_.checkpoint_failures++;
      spdlog::error("checkpoint failed (the log still holds everything): {}",
                    status.error().message);
      failed_ = std::move(changes);
    }
    wake_.notify_all();
    if (stopping_) return;
  }
}

Status RocksDbStore::WriteCheckpoint(const Changes& changes, uint64_t log_start) {
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = true;  // durable by the flush below; until then, by the log
  rocksdb::WriteBatch batch;
  const auto write = [&]() -> Status {
    auto status = FromRocks(db_->Write(write_options, &batch), "checkpoint write");
    batch.Clear();
    return status;
  };
  if (changes.clear_all) {
    batch.DeleteRange(std::string(1, kCounterPrefix), std::string(1, kCounterPrefixEnd));
  }
  char value[16];
  for (const auto& [key, record] : changes.keys) {
    if (record) {
      std::memcpy(value, &record->value, 8);
      std::memcpy(value + 8, &record->deadline_ms, 8);
      batch.Put(CounterKey(key), rocksdb::Slice(value, record->deadline_ms != 0 ? 16 : 8));
    } else {
      batch.Delete(CounterKey(key));
    }
    if (static_cast<size_t>(batch.Count()) >= kCheckpointChunk) {
      if (auto status = write(); !status) return status;
    }
  }
  char start[8];
  std::memcpy(start, &log_start, 8);
  batch.Put(kLogStartKey, rocksdb::Slice(start, 8));
  if (auto status = write(); !status) return status;
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (auto status = FromRocks(db_->Flush(flush), "checkpoint flush"); !status) return status;
  CommitLog::DropSegmentsBefore(log_dir_, log_start);
  return OkStatus();
}

Status RocksDbStore::CheckpointNow() {
  StartCheckpoint();
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return !job_ && !checkpoint_running_; });
  if (failed_) return IOError("checkpoint failed");
  return OkStatus();
}

engine::PersistenceStats RocksDbStore::stats() const {
  engine::PersistenceStats stats;
  {
    std::lock_guard lock(mutex_);
    stats = stats_;
  }
  uint64_t bytes = 0;
  db_->GetIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize, &bytes);
  stats.disk_bytes = bytes;
  return stats;
}

}  // namespace tally::storage
