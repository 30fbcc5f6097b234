// What the engine's multi-threaded tests share: an in-memory Persistence laid out like the
// real store (tables, a log, checkpoints; commits that can fail or wait at a gate), and
// helpers to read a keyspace or a store back as plain maps. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace tally::engine::test_support {

using namespace std::chrono_literals;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

inline constexpr int64_t kStart = 1'700'000'000'000;  // the ManualClock's start, Unix ms
inline constexpr auto kPatience = 10s;                // how long a test waits for the committer

// Applies a batch the way a store must: clear, then deletes, then puts.
inline void ApplyBatch(const CommitBatch& batch, std::map<std::string, CounterRecord>* data) {
  if (batch.clear_all()) data->clear();
  for (size_t i = 0; i < batch.delete_count(); ++i) data->erase(std::string(batch.delete_key(i)));
  for (size_t i = 0; i < batch.put_count(); ++i) {
    (*data)[std::string(batch.put_key(i))] = batch.put_record(i);
  }
}

// An in-memory store laid out like the real one: tables as of the last finished checkpoint,
// plus a log of the operations committed since. Load replays both, as recovery does.
// Commits and syncs can be made to fail or to wait at a gate, and what was committed, with or
// without fsync, is recorded. Like the real store, a Sync covers the commits that returned
// before it began, and a Commit may run while a Sync waits.
class FakePersistence final : public Persistence {
 public:
  struct LoggedOp {
    enum Kind { kPut, kDelete, kClearAll } kind;
    std::string key;
    CounterRecord record;
  };
  struct CommitRecord {
    uint64_t epoch;
    bool sync;            // Commit was called with sync
    bool synced = false;  // on stable storage by now (with sync, or by a later Sync)
  };

  Status Commit(const CommitBatch& batch, bool sync) override {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !held_; });
    ++commit_calls_;
    if (failing_) {
      ++failures_;
      changed_.notify_all();
      return IOError("injected failure");
    }
    if (batch.clear_all()) Log({LoggedOp::kClearAll, "", {}});
    for (size_t i = 0; i < batch.delete_count(); ++i) {
      Log({LoggedOp::kDelete, std::string(batch.delete_key(i)), {}});
    }
    for (size_t i = 0; i < batch.put_count(); ++i) {
      Log({LoggedOp::kPut, std::string(batch.put_key(i)), batch.put_record(i)});
    }
    commits_.push_back(CommitRecord{batch.epoch(), sync});
    if (sync) MarkSynced(commits_.size());
    changed_.notify_all();
    return OkStatus();
  }

  Status Sync() override {
    std::unique_lock lock(mutex_);
    const size_t covered = commits_.size();  // what was written before the call
    ++syncs_blocked_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !sync_held_; });
    --syncs_blocked_;
    if (sync_failing_) {
      ++sync_failures_;
      changed_.notify_all();
      return IOError("injected fsync failure");
    }
    ++syncs_;
    MarkSynced(covered);
    changed_.notify_all();
    return OkStatus();
  }

  Status Load(LoadVisitor& visitor) override {
    std::lock_guard lock(mutex_);
    for (const auto& [key, record] : tables_) visitor.Put(key, record, LoadSource::kTables);
    for (const LoggedOp& op : log_) {
      switch (op.kind) {
        case LoggedOp::kPut:
          visitor.Put(op.key, op.record, LoadSource::kLog);
          break;
        case LoggedOp::kDelete:
          visitor.Delete(op.key, LoadSource::kLog);
          break;
        case LoggedOp::kClearAll:
          visitor.ClearAll(LoadSource::kLog);
          break;
      }
    }
    return OkStatus();
  }

  // The token is the position in the log where the checkpoint began: what was logged before
  // it is dropped once the checkpoint finishes.
  Result<uint64_t> BeginCheckpoint() override {
    std::lock_guard lock(mutex_);
    pending_tables_ = tables_;
    commits_before_checkpoint_ = commits_.size();
    return log_base_ + log_.size();
  }
  Status CheckpointWrite(const CommitBatch& batch) override {
    std::lock_guard lock(mutex_);
    if (failing_checkpoints_) return IOError("injected checkpoint failure");
    checkpoint_ops_ += (batch.clear_all() ? 1 : 0) + batch.delete_count() + batch.put_count();
    ApplyBatch(batch, &pending_tables_);
    return OkStatus();
  }
  Status WriteCatalog(std::span<const CatalogOp> ops) override {
    std::lock_guard lock(mutex_);
    for (const CatalogOp& op : ops) {
      if (op.value) {
        catalog_[op.name] = *op.value;
      } else {
        catalog_.erase(op.name);
      }
    }
    return OkStatus();
  }
  Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog() override {
    std::lock_guard lock(mutex_);
    return std::vector<std::pair<std::string, std::string>>(catalog_.begin(), catalog_.end());
  }
  void CheckpointCut(uint64_t token) override {
    std::function<void(uint64_t)> on_cut;
    {
      std::lock_guard lock(mutex_);
      cuts_.push_back(token);
      on_cut = on_cut_;
    }
    if (on_cut) on_cut(token);
  }
  Status FinishCheckpoint(uint64_t token) override {
    std::lock_guard lock(mutex_);
    // What the checkpoint drops must be on stable storage; commits after it began may still
    // wait for their fsync (the sync thread's), as they stay in the log.
    if (synced_ < commits_before_checkpoint_) {
      return IOError("checkpoint finished over unsynced commits");
    }
    tables_ = pending_tables_;
    log_.erase(log_.begin(), log_.begin() + static_cast<ptrdiff_t>(token - log_base_));
    log_base_ = token;
    ++checkpoints_;
    return OkStatus();
  }

  // Test controls.
  void Preload(const std::string& key, CounterRecord record) {
    std::lock_guard lock(mutex_);
    tables_[key] = record;
    data_[key] = record;
  }
  void AddLogged(LoggedOp op) {
    std::lock_guard lock(mutex_);
    Log(std::move(op));
  }
  // Runs `on_cut` in CheckpointCut (with every stripe held), without the store's lock.
  void SetOnCut(std::function<void(uint64_t token)> on_cut) {
    std::lock_guard lock(mutex_);
    on_cut_ = std::move(on_cut);
  }
  std::vector<uint64_t> cuts() const {
    std::lock_guard lock(mutex_);
    return cuts_;
  }
  void SetFailing(bool failing) {
    std::lock_guard lock(mutex_);
    failing_ = failing;
  }
  void SetFailingCheckpoints(bool failing) {
    std::lock_guard lock(mutex_);
    failing_checkpoints_ = failing;
  }
  void SetHeld(bool held) {
    std::lock_guard lock(mutex_);
    held_ = held;
    changed_.notify_all();
  }
  // Syncs wait at a gate of their own (commits go on meanwhile), or fail.
  void SetSyncHeld(bool held) {
    std::lock_guard lock(mutex_);
    sync_held_ = held;
    changed_.notify_all();
  }
  void SetSyncFailing(bool failing) {
    std::lock_guard lock(mutex_);
    sync_failing_ = failing;
  }
  // Waits until a Sync is blocked at the gate.
  bool WaitForBlockedSync() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kPatience, [&] { return syncs_blocked_ > 0; });
  }
  bool WaitForSyncFailures(uint64_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kPatience, [&] { return sync_failures_ >= n; });
  }
  // Waits until a commit of `epoch` was written.
  bool WaitForCommit(uint64_t epoch) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kPatience, [&] {
      return std::any_of(commits_.begin(), commits_.end(),
                         [&](const CommitRecord& commit) { return commit.epoch == epoch; });
    });
  }
  bool WaitForFailures(uint64_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kPatience, [&] { return failures_ >= n; });
  }
  // Waits until `predicate(data)` holds.
  bool WaitForData(
      const std::function<bool(const std::map<std::string, CounterRecord>&)>& predicate) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kPatience, [&] { return predicate(data_); });
  }

  // What recovery would read: the tables with the log applied.
  std::optional<CounterRecord> Stored(const std::string& key) const {
    std::lock_guard lock(mutex_);
    const auto it = data_.find(key);
    if (it == data_.end()) return std::nullopt;
    return it->second;
  }
  std::map<std::string, CounterRecord> data() const {
    std::lock_guard lock(mutex_);
    return data_;
  }
  std::map<std::string, CounterRecord> tables() const {
    std::lock_guard lock(mutex_);
    return tables_;
  }
  size_t log_size() const {
    std::lock_guard lock(mutex_);
    return log_.size();
  }
  uint64_t checkpoints() const {
    std::lock_guard lock(mutex_);
    return checkpoints_;
  }
  // Operations (clear, delete, put) written by checkpoints so far.
  uint64_t checkpoint_ops() const {
    std::lock_guard lock(mutex_);
    return checkpoint_ops_;
  }
  std::vector<CommitRecord> commits() const {
    std::lock_guard lock(mutex_);
    return commits_;
  }
  uint64_t commit_calls() const {
    std::lock_guard lock(mutex_);
    return commit_calls_;
  }
  uint64_t syncs() const {
    std::lock_guard lock(mutex_);
    return syncs_;
  }
  // True when everything committed has been fsync'd.
  bool all_synced() const {
    std::lock_guard lock(mutex_);
    return synced_ == commits_.size();
  }

 private:
  // The first `count` commits are on stable storage. REQUIRES: mutex_ held.
  void MarkSynced(size_t count) {
    for (size_t i = synced_; i < count; ++i) commits_[i].synced = true;
    synced_ = std::max(synced_, count);
  }

  // REQUIRES: mutex_ held.
  void Log(LoggedOp op) {
    switch (op.kind) {
      case LoggedOp::kPut:
        data_[op.key] = op.record;
        break;
      case LoggedOp::kDelete:
        data_.erase(op.key);
        break;
      case LoggedOp::kClearAll:
        data_.clear();
        break;
    }
    log_.push_back(std::move(op));
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, CounterRecord> tables_;          // as of the last checkpoint
  std::map<std::string, CounterRecord> pending_tables_;  // the checkpoint being written
  std::map<std::string, std::string> catalog_;           // catalog records
  std::vector<LoggedOp> log_;                            // committed since
  uint64_t log_base_ = 0;                                // log position of log_[0]
  std::map<std::string, CounterRecord> data_;            // tables_ + log_
  std::vector<CommitRecord> commits_;
  bool failing_ = false;
  bool failing_checkpoints_ = false;
  bool held_ = false;
  bool sync_held_ = false;
  bool sync_failing_ = false;
  size_t synced_ = 0;                     // commits_[0, synced_) are on stable storage
  size_t commits_before_checkpoint_ = 0;  // commits_.size() at the last BeginCheckpoint
  int syncs_blocked_ = 0;
  uint64_t sync_failures_ = 0;
  uint64_t commit_calls_ = 0;
  uint64_t failures_ = 0;
  uint64_t syncs_ = 0;
  uint64_t checkpoints_ = 0;
  uint64_t checkpoint_ops_ = 0;
  std::vector<uint64_t> cuts_;  // CheckpointCut's tokens
  std::function<void(uint64_t)> on_cut_;
};

// What a restart would load from `store`: its Load replayed into a plain map.
inline std::map<std::string, CounterRecord> Recovered(FakePersistence& store) {
  class Replay final : public LoadVisitor {
   public:
    void Put(std::string_view key, const CounterRecord& record, LoadSource) override {
      data[std::string(key)] = record;
    }
    void Delete(std::string_view key, LoadSource) override { data.erase(std::string(key)); }
    void ClearAll(LoadSource) override { data.clear(); }
    std::map<std::string, CounterRecord> data;
  } replay;
  EXPECT_TRUE(store.Load(replay).has_value());
  return replay.data;
}

// Every live counter of `keyspace` with its value and deadline, as a store would hold it.
inline std::map<std::string, CounterRecord> Contents(Keyspace& keyspace) {
  std::vector<std::string> keys;
  uint64_t cursor = 0;
  do {
    cursor = keyspace.Scan(cursor, 1000, nullptr, &keys);
  } while (cursor != 0);
  std::map<std::string, CounterRecord> contents;
  for (const std::string& name : keys) {
    const HashedKey key(name);
    View view = keyspace.Lock(key);
    const std::optional<int64_t> value = view.Get(key);
    if (!value) continue;
    const int64_t deadline = view.DeadlineMillis(key);
    contents[name] = CounterRecord{*value, deadline < 0 ? 0 : deadline};
  }
  return contents;
}

// Counters as comparable (value, deadline) pairs.
using Snapshot = std::map<std::string, std::pair<int64_t, int64_t>>;
inline Snapshot Snap(const std::map<std::string, CounterRecord>& records) {
  Snapshot snapshot;
  for (const auto& [key, record] : records) snapshot[key] = {record.value, record.deadline_ms};
  return snapshot;
}

// Polls `predicate` until it holds or patience runs out.
inline bool Eventually(const std::function<bool()>& predicate,
                       std::chrono::milliseconds patience = kPatience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace tally::engine::test_support
