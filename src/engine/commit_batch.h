// CommitBatch: what one group commit makes durable, in a form any store can write
// atomically. The engine fills it; a Persistence implementation writes it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tally::engine {

// A counter's durable state: its value and, when it has one, its expiry deadline.
struct CounterRecord {
  int64_t value = 0;
  int64_t deadline_ms = 0;  // Unix milliseconds; 0 = no expiry
};

// The operations of one atomic commit, applied in this order: clear all counters (when
// `clear_all`), then `deletes`, then `puts`. Keys are stored back to back in `key_bytes`.
class CommitBatch {
 public:
  struct Put {
    uint32_t key_offset;
    uint32_t key_length;
    CounterRecord record;
  };

  void Clear() {
    clear_all_ = false;
    key_bytes_.clear();
    deletes_.clear();
    puts_.clear();
    epoch_ = 0;
  }
  bool empty() const { return !clear_all_ && deletes_.empty() && puts_.empty(); }

  void ClearAll() { clear_all_ = true; }
  void AddDelete(std::string_view key) { deletes_.push_back(Store(key)); }
  void AddPut(std::string_view key, CounterRecord record) {
    const auto [offset, length] = Store(key);
    puts_.push_back(Put{offset, length, record});
  }

  bool clear_all() const { return clear_all_; }
  size_t delete_count() const { return deletes_.size(); }
  size_t put_count() const { return puts_.size(); }
  std::string_view delete_key(size_t i) const {
    return {key_bytes_.data() + deletes_[i].first, deletes_[i].second};
  }
  std::string_view put_key(size_t i) const {
    return {key_bytes_.data() + puts_[i].key_offset, puts_[i].key_length};
  }
  const CounterRecord& put_record(size_t i) const { return puts_[i].record; }

  // The commit epoch this batch makes durable.
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }

 private:
  std::pair<uint32_t, uint32_t> Store(std::string_view key) {
    const auto offset = static_cast<uint32_t>(key_bytes_.size());
    key_bytes_.append(key);
    return {offset, static_cast<uint32_t>(key.size())};
  }

  bool clear_all_ = false;
  std::string key_bytes_;
  std::vector<std::pair<uint32_t, uint32_t>> deletes_;
  std::vector<Put> puts_;
  uint64_t epoch_ = 0;
};

// What a store reports about itself.
struct PersistenceStats {
  uint64_t log_bytes = 0;   // bytes of log written since the last checkpoint began
  uint64_t disk_bytes = 0;  // bytes of the store's tables
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

  // Writes the whole batch atomically. With `sync`, returns only once the batch is on
  // stable storage (fsync'd), so that it survives a crash of the machine.
  virtual Status Commit(const CommitBatch& batch, bool sync) = 0;

  // Makes everything committed so far durable against a machine crash (fsync).
  virtual Status Sync() = 0;

  // Replays the stored state at start: every counter of the tables as a Put, in any order,
  // then the logged operations in commit order. A later operation supersedes an earlier.
  virtual Status Load(LoadVisitor& visitor) = 0;

  // REQUIRES: no Commit() runs concurrently. Returns a token for FinishCheckpoint().
  virtual Result<uint64_t> BeginCheckpoint() = 0;
  // Writes the batch's operations to the tables (not durable until FinishCheckpoint).
  virtual Status CheckpointWrite(const CommitBatch& batch) = 0;
  virtual Status FinishCheckpoint(uint64_t token) = 0;

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
