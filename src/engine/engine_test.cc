// Tests of the parts of the engine that run on several threads: the group committer and its
// checkpoints over an in-memory Persistence, the Engine's start and stop, and writers,
// readers and a drainer hammering one keyspace at once. Run them under TSan too (with
// TSAN_OPTIONS=detect_deadlocks=0: Drain holds all 128 stripe locks, more than TSan's
// deadlock detector can track).
#include "engine/engine.h"

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

namespace tally::engine {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

using namespace std::chrono_literals;

constexpr int64_t kStart = 1'700'000'000'000;  // the ManualClock's start, Unix ms
constexpr auto kPatience = 10s;                // how long a test waits for the committer

// Applies a batch the way a store must: clear, then deletes, then puts.
void ApplyBatch(const CommitBatch& batch, std::map<std::string, CounterRecord>* data) {
  if (batch.clear_all()) data->clear();
  for (size_t i = 0; i < batch.delete_count(); ++i) data->erase(std::string(batch.delete_key(i)));
  for (size_t i = 0; i < batch.put_count(); ++i) {
    (*data)[std::string(batch.put_key(i))] = batch.put_record(i);
  }
}

// An in-memory store laid out like the real one: tables as of the last finished checkpoint,
// plus a log of the operations committed since. Load replays both, as recovery does.
// Commits can be made to fail or to wait at a gate, and what was committed, with or
// without fsync, is recorded.
class FakePersistence final : public Persistence {
 public:
  struct LoggedOp {
    enum Kind { kPut, kDelete, kClearAll } kind;
    std::string key;
    CounterRecord record;
  };
  struct CommitRecord {
    uint64_t epoch;
    bool sync;
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
    unsynced_ = !sync;
    changed_.notify_all();
    return OkStatus();
  }

  Status Sync() override {
    std::lock_guard lock(mutex_);
    ++syncs_;
    unsynced_ = false;
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
  Status FinishCheckpoint(uint64_t token) override {
    std::lock_guard lock(mutex_);
    if (unsynced_) return IOError("checkpoint finished over unsynced commits");
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
    return !unsynced_;
  }

 private:
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
  bool unsynced_ = false;
  uint64_t commit_calls_ = 0;
  uint64_t failures_ = 0;
  uint64_t syncs_ = 0;
  uint64_t checkpoints_ = 0;
  uint64_t checkpoint_ops_ = 0;
};

// What a restart would load from `store`: its Load replayed into a plain map.
std::map<std::string, CounterRecord> Recovered(FakePersistence& store) {
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
std::map<std::string, CounterRecord> Contents(Keyspace& keyspace) {
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
Snapshot Snap(const std::map<std::string, CounterRecord>& records) {
  Snapshot snapshot;
  for (const auto& [key, record] : records) snapshot[key] = {record.value, record.deadline_ms};
  return snapshot;
}

// Polls `predicate` until it holds or patience runs out.
bool Eventually(const std::function<bool()>& predicate) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// ---- Committer ---------------------------------------------------------------------------

class CommitterTest : public ::testing::Test {
 protected:
  void MakeCommitter(CommitterOptions options = {}) {
    committer_ = std::make_unique<Committer>(&keyspace_, &store_, options);
    keyspace_.set_on_write([this] { committer_->RequestCommit(); });
  }
  void StartCommitter(CommitterOptions options = {}) {
    MakeCommitter(options);
    committer_->Start();
  }
  // Returns the epoch the write must wait for.
  uint64_t IncrBy(std::string_view k, int64_t delta) {
    const HashedKey key(k);
    View view = keyspace_.Lock(key);
    EXPECT_TRUE(view.IncrBy(key, delta).has_value());
    return view.required_epoch();
  }
  void TearDown() override {
    if (committer_) committer_->Stop();
  }
  // Records the epochs announced to a listener, and on which threads.
  void ListenForEpochs() {
    committer_->AddDurableListener([this](uint64_t epoch) {
      std::lock_guard lock(listened_mutex_);
      announced_.push_back(epoch);
    });
  }
  std::vector<uint64_t> announced() {
    std::lock_guard lock(listened_mutex_);
    return announced_;
  }

  ManualClock clock_{kStart};
  Keyspace keyspace_{&clock_};
  FakePersistence store_;
  std::mutex listened_mutex_;
  std::vector<uint64_t> announced_;
  std::unique_ptr<Committer> committer_;  // last: stopped before the rest goes
};

TEST_F(CommitterTest, SyncModeAnnouncesDurableEpochsInOrder) {
  MakeCommitter();
  ListenForEpochs();
  committer_->Start();
  EXPECT_EQ(committer_->durable_epoch(), 0u);
  EXPECT_EQ(committer_->durability(), Durability::kSync);
  uint64_t last = 0;
  for (int i = 1; i <= 30; ++i) {
    const uint64_t epoch = IncrBy("k", 1);
    EXPECT_GT(epoch, last);
    last = epoch;
    committer_->WaitDurable(epoch);
    EXPECT_GE(committer_->durable_epoch(), epoch);
    const std::optional<CounterRecord> stored = store_.Stored("k");
    ASSERT_TRUE(stored.has_value());
    EXPECT_EQ(stored->value, i);  // durable means in the store
  }
  committer_->Stop();
  const std::vector<uint64_t> epochs = announced();
  ASSERT_FALSE(epochs.empty());
  for (size_t i = 0; i < epochs.size(); ++i)
    EXPECT_EQ(epochs[i], i + 1) << "in order, none skipped";
  EXPECT_GE(epochs.back(), last);
  for (const auto& commit : store_.commits()) EXPECT_TRUE(commit.sync) << commit.epoch;
  EXPECT_TRUE(store_.all_synced());
  const CommitStats stats = committer_->stats();
  EXPECT_EQ(stats.commits, epochs.size());
  EXPECT_EQ(stats.puts, store_.commits().size());  // one key: one put per non-empty batch
  EXPECT_EQ(stats.failures, 0u);
  EXPECT_TRUE(stats.healthy);
}

TEST_F(CommitterTest, StartsFromTheKeyspacesEpoch) {
  // Epochs closed before the committer starts (e.g. at load) are not waited for.
  ASSERT_GE(IncrBy("k", 1), 1u);
  CommitBatch batch;
  ASSERT_TRUE(keyspace_.Drain(&batch));
  StartCommitter();
  EXPECT_EQ(committer_->durable_epoch(), 1u);
  const uint64_t epoch = IncrBy("k", 1);
  EXPECT_EQ(epoch, 2u);
  committer_->WaitDurable(epoch);
  EXPECT_EQ(store_.Stored("k")->value, 2);
}

TEST_F(CommitterTest, WaitDurableBlocksUntilTheCommitLands) {
  StartCommitter();
  store_.SetHeld(true);
  const uint64_t epoch = IncrBy("k", 7);
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    committer_->WaitDurable(epoch);
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned.load());
  EXPECT_LT(committer_->durable_epoch(), epoch);
  EXPECT_EQ(store_.Stored("k"), std::nullopt);
  store_.SetHeld(false);
  waiter.join();
  EXPECT_TRUE(returned.load());
  EXPECT_GE(committer_->durable_epoch(), epoch);
  EXPECT_EQ(store_.Stored("k")->value, 7);
}

TEST_F(CommitterTest, AFailedCommitIsRetriedAndNotDurableUntilItSucceeds) {
  MakeCommitter();
  ListenForEpochs();
  committer_->Start();
  store_.SetFailing(true);
  const uint64_t epoch = IncrBy("k", 1);
  ASSERT_TRUE(store_.WaitForFailures(3));
  EXPECT_LT(committer_->durable_epoch(), epoch);
  {
    const std::vector<uint64_t> so_far = announced();
    EXPECT_EQ(std::find(so_far.begin(), so_far.end(), epoch), so_far.end());
  }
  EXPECT_EQ(store_.Stored("k"), std::nullopt);
  // The committer counts a failure just after the store reports it.
  EXPECT_TRUE(Eventually([&] { return committer_->stats().failures >= 3; }));
  EXPECT_FALSE(committer_->stats().healthy);

  // Writers go on into the next epoch meanwhile.
  const uint64_t next = IncrBy("k", 1);
  EXPECT_EQ(next, epoch + 1);

  store_.SetFailing(false);
  committer_->WaitDurable(next);
  EXPECT_EQ(store_.Stored("k")->value, 2);
  const CommitStats stats = committer_->stats();
  EXPECT_TRUE(stats.healthy);
  EXPECT_GE(stats.failures, 3u);
  committer_->Stop();
  const std::vector<uint64_t> epochs = announced();
  ASSERT_GE(epochs.size(), 2u);
  EXPECT_TRUE(std::is_sorted(epochs.begin(), epochs.end()));
  EXPECT_EQ(std::adjacent_find(epochs.begin(), epochs.end()), epochs.end());
  EXPECT_NE(std::find(epochs.begin(), epochs.end(), epoch), epochs.end());
  EXPECT_NE(std::find(epochs.begin(), epochs.end(), next), epochs.end());
}

TEST_F(CommitterTest, AnEpochThatChangedNothingIsAnnouncedWithoutAWrite) {
  MakeCommitter();
  ListenForEpochs();
  committer_->Start();
  committer_->WaitDurable(IncrBy("k", 1));
  const uint64_t calls = store_.commit_calls();
  uint64_t epoch;
  {
    const HashedKey key("k");
    View view = keyspace_.Lock(key);
    EXPECT_FALSE(view.Set(key, 5, SetOptions{.condition = SetCondition::kIfMissing}).applied);
    epoch = view.required_epoch();
  }
  committer_->WaitDurable(epoch);
  committer_->Stop();
  EXPECT_EQ(store_.commit_calls(), calls);
  const std::vector<uint64_t> epochs = announced();
  EXPECT_NE(std::find(epochs.begin(), epochs.end(), epoch), epochs.end());
}

TEST_F(CommitterTest, ObserversSeeEachDurableBatchBeforeItsEpochIsAnnounced) {
  MakeCommitter({});
  std::mutex mutex;
  std::vector<std::string> seen;  // "put x=5", "delete x", "durable <epoch>"
  committer_->AddCommitObserver([&](const CommitBatch& batch, uint64_t) {
    std::lock_guard lock(mutex);
    for (size_t i = 0; i < batch.put_count(); i++) {
      seen.push_back("put " + std::string(batch.put_key(i)) + "=" +
                     std::to_string(batch.put_record(i).value));
    }
    for (size_t i = 0; i < batch.delete_count(); i++) {
      seen.push_back("delete " + std::string(batch.delete_key(i)));
    }
  });
  committer_->AddDurableListener([&](uint64_t epoch) {
    std::lock_guard lock(mutex);
    seen.push_back("durable " + std::to_string(epoch));
  });
  committer_->Start();
  const HashedKey key("x");
  uint64_t first;
  {
    View view = keyspace_.Lock(key);  // two increments in one epoch: one put
    ASSERT_TRUE(view.IncrBy(key, 2).has_value());
    ASSERT_TRUE(view.IncrBy(key, 3).has_value());
    first = view.required_epoch();
  }
  committer_->WaitDurable(first);
  uint64_t second;
  {
    View view = keyspace_.Lock(key);
    ASSERT_TRUE(view.Delete(key));
    second = view.required_epoch();
  }
  committer_->WaitDurable(second);
  std::lock_guard lock(mutex);
  EXPECT_EQ(seen, (std::vector<std::string>{"put x=5", "durable " + std::to_string(first),
                                            "delete x", "durable " + std::to_string(second)}));
}

TEST_F(CommitterTest, CountsPutsAndDeletes) {
  StartCommitter();
  std::vector<std::string> names = {"x", "y", "z"};
  std::vector<HashedKey> keys(names.begin(), names.end());
  uint64_t epoch;
  {
    View view = keyspace_.Lock(keys);
    for (const HashedKey& key : keys) ASSERT_TRUE(view.IncrBy(key, 1).has_value());
    epoch = view.required_epoch();
  }
  committer_->WaitDurable(epoch);
  {
    View view = keyspace_.Lock(keys[0]);
    ASSERT_TRUE(view.Delete(keys[0]));
    epoch = view.required_epoch();
  }
  committer_->WaitDurable(epoch);
  committer_->Stop();
  const CommitStats stats = committer_->stats();
  EXPECT_EQ(stats.commits, 2u);
  EXPECT_EQ(stats.puts, 3u);
  EXPECT_EQ(stats.deletes, 1u);
  EXPECT_EQ(store_.data().size(), 2u);
  EXPECT_FALSE(store_.Stored("x").has_value());
}

TEST_F(CommitterTest, StopCommitsEverythingLeftInSyncMode) {
  StartCommitter();
  for (int i = 0; i < 2000; ++i) IncrBy("s:" + std::to_string(i % 500), 1);
  committer_->Stop();
  EXPECT_EQ(committer_->durable_epoch(), keyspace_.open_epoch() - 1);
  const auto data = store_.data();
  ASSERT_EQ(data.size(), 500u);
  for (const auto& [key, record] : data) EXPECT_EQ(record.value, 4) << key;
  EXPECT_TRUE(store_.all_synced());
  // A last checkpoint moved it all into the tables: a restart replays no log.
  EXPECT_EQ(store_.tables().size(), 500u);
  EXPECT_EQ(store_.log_size(), 0u);
}

TEST_F(CommitterTest, InSyncModeTheTimerCommitsWhatNobodyWaitsFor) {
  StartCommitter(CommitterOptions{.reclaim_interval_ms = 10});
  IncrBy("unwaited", 3);
  EXPECT_TRUE(store_.WaitForData([](const auto& data) { return data.contains("unwaited"); }));
  EXPECT_EQ(store_.Stored("unwaited")->value, 3);
}

TEST_F(CommitterTest, SyncModeWithTheCommitterThreadCommitsOnAWakeUp) {
  // A long timer: only RequestCommit can get the write committed promptly.
  StartCommitter(
      CommitterOptions{.commit_on_waiting_thread = false, .reclaim_interval_ms = 60'000});
  EXPECT_FALSE(committer_->commits_on_waiting_thread());
  std::mutex mutex;
  std::vector<std::thread::id> threads;
  committer_->AddDurableListener([&](uint64_t) {
    std::lock_guard lock(mutex);
    threads.push_back(std::this_thread::get_id());
  });
  IncrBy("woken", 1);
  EXPECT_TRUE(store_.WaitForData([](const auto& data) { return data.contains("woken"); }));
  const auto commits = store_.commits();
  ASSERT_EQ(commits.size(), 1u);
  EXPECT_TRUE(commits.front().sync);
  committer_->Stop();
  std::lock_guard lock(mutex);
  ASSERT_FALSE(threads.empty());
  EXPECT_NE(threads.front(), std::this_thread::get_id());  // announced by the committer thread
}

TEST_F(CommitterTest, StopCommitsAndSyncsEverythingLeftInAsyncMode) {
  StartCommitter(CommitterOptions{.durability = Durability::kAsync, .sync_interval_ms = 60'000});
  for (int i = 0; i < 2000; ++i) IncrBy("a:" + std::to_string(i % 500), 1);
  committer_->Stop();
  EXPECT_EQ(committer_->durable_epoch(), keyspace_.open_epoch() - 1);
  const auto data = store_.data();
  ASSERT_EQ(data.size(), 500u);
  for (const auto& [key, record] : data) EXPECT_EQ(record.value, 4) << key;
  EXPECT_TRUE(store_.all_synced());  // Stop fsyncs whatever the mode
}

TEST_F(CommitterTest, StopRacingWithAWriterKeepsEveryWriteBeforeIt) {
  StartCommitter();
  std::atomic<int> completed{0};
  std::atomic<bool> quit{false};
  std::thread writer([&] {
    for (int i = 0; !quit.load(); ++i) {
      IncrBy("w:" + std::to_string(i), 1);
      completed.store(i + 1);
      if (i > 200'000) break;
    }
  });
  ASSERT_TRUE(Eventually([&] { return completed.load() > 1000; }));
  const int before_stop = completed.load();
  committer_->Stop();
  quit = true;
  writer.join();
  const auto data = store_.data();
  for (int i = 0; i < before_stop; ++i) {
    ASSERT_TRUE(data.contains("w:" + std::to_string(i))) << i << " of " << before_stop;
  }
}

TEST_F(CommitterTest, AsyncModeCommitsWithoutFsyncAndSyncsPeriodically) {
  StartCommitter(CommitterOptions{.durability = Durability::kAsync, .sync_interval_ms = 20});
  EXPECT_EQ(committer_->durability(), Durability::kAsync);
  IncrBy("k", 1);  // wakes the committer thread; nobody waits
  EXPECT_TRUE(store_.WaitForData([](const auto& data) { return data.contains("k"); }));
  const auto commits = store_.commits();
  ASSERT_FALSE(commits.empty());
  EXPECT_FALSE(commits.front().sync);
  EXPECT_TRUE(Eventually([&] { return store_.syncs() >= 1 && store_.all_synced(); }));
}

// Polls `predicate` for `patience`.
bool Within(std::chrono::milliseconds patience, const std::function<bool()>& predicate) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A commit made inline (WaitDurable/TryCommitNow) in async mode is fsync'd on the
// interval like the committer thread's own.
TEST_F(CommitterTest, AsyncModeSyncsInlineCommitsPeriodically) {
  StartCommitter(CommitterOptions{.durability = Durability::kAsync, .sync_interval_ms = 20});
  keyspace_.set_on_write({});  // so that only the inline commit below writes the batch
  committer_->WaitDurable(IncrBy("k", 1));
  ASSERT_FALSE(store_.commits().empty());
  EXPECT_TRUE(Within(1000ms, [&] { return store_.all_synced(); }))
      << "written 1 s ago, sync interval 20 ms";
}

TEST_F(CommitterTest, ReclaimsExpiredCountersInTheBackground) {
  StartCommitter(CommitterOptions{.reclaim_interval_ms = 10});
  uint64_t epoch;
  {
    const HashedKey key("ttl");
    View view = keyspace_.Lock(key);
    ASSERT_TRUE(
        view.Set(key, 1,
                 SetOptions{.expiry = ExpiryAction::kSetDeadline, .deadline_ms = kStart + 100})
            .applied);
    epoch = view.required_epoch();
  }
  committer_->WaitDurable(epoch);
  ASSERT_TRUE(store_.Stored("ttl").has_value());
  EXPECT_EQ(store_.Stored("ttl")->deadline_ms, kStart + 100);
  clock_.Advance(100);
  EXPECT_TRUE(store_.WaitForData([](const auto& data) { return !data.contains("ttl"); }));
  EXPECT_EQ(keyspace_.size(), 0u);
  EXPECT_EQ(committer_->stats().reclaimed, 1u);
}

TEST_F(CommitterTest, WaitDurableReturnsWhenStopped) {
  StartCommitter();
  std::thread waiter([&] { committer_->WaitDurable(1'000'000); });
  std::this_thread::sleep_for(20ms);
  committer_->Stop();
  waiter.join();       // would hang if Stop did not wake it
  committer_->Stop();  // a second Stop is harmless
}

// ---- Checkpoints -------------------------------------------------------------------------

TEST_F(CommitterTest, CheckpointWritesChangedCountersAndDropsTheLog) {
  StartCommitter();
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) names.push_back("c:" + std::to_string(i));
  std::vector<HashedKey> keys(names.begin(), names.end());
  uint64_t epoch;
  {
    View view = keyspace_.Lock(keys);
    for (size_t i = 0; i < keys.size(); ++i)
      ASSERT_TRUE(view.IncrBy(keys[i], static_cast<int64_t>(i)).has_value());
    epoch = view.required_epoch();
  }
  committer_->WaitDurable(epoch);
  EXPECT_EQ(store_.log_size(), 100u);
  EXPECT_GE(keyspace_.checkpoint_backlog(), 100u);
  ASSERT_TRUE(committer_->CheckpointNow().has_value());
  EXPECT_EQ(store_.checkpoint_ops(), 100u);
  EXPECT_EQ(store_.log_size(), 0u);
  EXPECT_EQ(Snap(store_.tables()), Snap(Contents(keyspace_)));
  EXPECT_EQ(keyspace_.checkpoint_backlog(), 0u);
  EXPECT_EQ(committer_->stats().checkpoints, 1u);

  // The next one writes only what changed since: 10 puts and 5 deletes.
  {
    View view = keyspace_.Lock(keys);
    for (size_t i = 0; i < 10; ++i) ASSERT_TRUE(view.IncrBy(keys[i], 1000).has_value());
    for (size_t i = 10; i < 15; ++i) ASSERT_TRUE(view.Delete(keys[i]));
    ASSERT_TRUE(view.Expire(keys[20], kStart + 5000, ExpireCondition::kAlways));
    epoch = view.required_epoch();
  }
  committer_->WaitDurable(epoch);
  ASSERT_TRUE(committer_->CheckpointNow().has_value());
  EXPECT_EQ(store_.checkpoint_ops(), 100u + 16u);
  EXPECT_EQ(store_.log_size(), 0u);
  EXPECT_EQ(Snap(store_.tables()), Snap(Contents(keyspace_)));
  EXPECT_EQ(store_.tables().at("c:20").deadline_ms, kStart + 5000);
  EXPECT_EQ(Snap(Recovered(store_)), Snap(Contents(keyspace_)));

  // Nothing changed: an empty checkpoint.
  ASSERT_TRUE(committer_->CheckpointNow().has_value());
  EXPECT_EQ(store_.checkpoint_ops(), 116u);
  EXPECT_EQ(Snap(store_.tables()), Snap(Contents(keyspace_)));
}

TEST_F(CommitterTest, CheckpointAfterFlushAllEmptiesTheTables) {
  StartCommitter();
  for (int i = 0; i < 50; ++i) committer_->WaitDurable(IncrBy("old:" + std::to_string(i), 1));
  ASSERT_TRUE(committer_->CheckpointNow().has_value());
  ASSERT_EQ(store_.tables().size(), 50u);
  uint64_t epoch;
  {
    View all = keyspace_.LockAll();
    all.FlushAll();
    ASSERT_TRUE(all.IncrBy(HashedKey("new"), 7).has_value());
    epoch = all.required_epoch();
  }
  committer_->WaitDurable(epoch);
  EXPECT_EQ(Snap(Recovered(store_)),
            Snap(Contents(keyspace_)));  // the log's clear covers the tables
  ASSERT_TRUE(committer_->CheckpointNow().has_value());
  const auto tables = store_.tables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables.at("new").value, 7);
  EXPECT_EQ(Snap(Recovered(store_)), Snap(Contents(keyspace_)));
}

TEST_F(CommitterTest, AFailedCheckpointKeepsTheLogAndTheNextOneIsFull) {
  StartCommitter();
  for (int i = 0; i < 40; ++i) committer_->WaitDurable(IncrBy("f:" + std::to_string(i), i + 1));
  store_.SetFailingCheckpoints(true);
  EXPECT_FALSE(committer_->CheckpointNow().has_value());
  EXPECT_EQ(committer_->stats().checkpoint_failures, 1u);
  EXPECT_TRUE(store_.tables().empty());
  EXPECT_EQ(store_.log_size(), 40u);
  EXPECT_EQ(Snap(Recovered(store_)), Snap(Contents(keyspace_)));

  store_.SetFailingCheckpoints(false);
  committer_->WaitDurable(IncrBy("f:0", 100));
  const uint64_t ops_before = store_.checkpoint_ops();
  ASSERT_TRUE(committer_->CheckpointNow().has_value());
  // Full: a clear and every counter, not only the one changed since the failure.
  EXPECT_EQ(store_.checkpoint_ops() - ops_before, 1u + 40u);
  EXPECT_EQ(Snap(store_.tables()), Snap(Contents(keyspace_)));
  EXPECT_EQ(store_.log_size(), 0u);
  EXPECT_EQ(Snap(Recovered(store_)), Snap(Contents(keyspace_)));
}

// Checkpoints taken again and again while writers increment, set, expire and delete, each
// waiting for durability as the servers do: at the end a restart would load exactly the
// keyspace, whatever log segments the checkpoints dropped on the way.
TEST_F(CommitterTest, CheckpointsWhileWritersWriteLoseNothing) {
  StartCommitter();
  constexpr int kWriters = 3;
  const int turns = kSanitized ? 150 : 1500;
  std::atomic<bool> done{false};
  std::thread checkpointer([&] {
    while (!done.load()) {
      EXPECT_TRUE(committer_->CheckpointNow().has_value());
      std::this_thread::sleep_for(1ms);
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937_64 rng(500 + w);
      IncrementBuffer buffer(&keyspace_);
      for (int turn = 0; turn < turns; ++turn) {
        for (int j = 0; j < 8; ++j) buffer.Add(HashedKey("ck:" + std::to_string(rng() % 400)), 1);
        uint64_t epoch = buffer.Publish();
        buffer.Clear();
        const std::string name = "ck:" + std::to_string(rng() % 400);
        const HashedKey key(name);
        {
          View view = keyspace_.Lock(key);
          switch (rng() % 4) {
            case 0:
              view.Delete(key);
              break;
            case 1:
              view.Set(key, static_cast<int64_t>(rng() % 1000), SetOptions{});
              break;
            case 2:
              view.Expire(key, kStart + 10'000 + static_cast<int64_t>(rng() % 1000),
                          ExpireCondition::kAlways);
              break;
            default:
              view.Persist(key);
          }
          epoch = std::max(epoch, view.required_epoch());
        }
        committer_->WaitDurable(epoch);
      }
    });
  }
  for (std::thread& t : writers) t.join();
  done = true;
  checkpointer.join();
  EXPECT_GT(store_.checkpoints(), 0u);
  // Every writer waited for its last write: all is durable.
  EXPECT_EQ(Snap(Recovered(store_)), Snap(Contents(keyspace_)));
  committer_->Stop();
  EXPECT_EQ(store_.log_size(), 0u);
  EXPECT_EQ(Snap(store_.tables()), Snap(Contents(keyspace_)));
}

// ---- Engine ------------------------------------------------------------------------------

TEST(Engine, StartLoadsTheStoreThenItsLog) {
  ManualClock clock(kStart);
  FakePersistence store;
  store.Preload("a", CounterRecord{1, 0});
  store.Preload("b", CounterRecord{2, kStart + 1000});
  store.Preload("c", CounterRecord{3, 0});
  store.Preload("d", CounterRecord{4, kStart - 1});  // expired while the server was down
  store.AddLogged({FakePersistence::LoggedOp::kPut, "a", CounterRecord{10, 0}});
  store.AddLogged({FakePersistence::LoggedOp::kDelete, "c", {}});
  store.AddLogged({FakePersistence::LoggedOp::kPut, "e", CounterRecord{5, 0}});
  Engine engine(&store, EngineOptions{.commit = {.reclaim_interval_ms = 10}, .clock = &clock});
  ASSERT_TRUE(engine.Start().has_value());
  EXPECT_EQ(engine.loaded_counters(), 3u);
  auto get = [&](std::string_view k) {
    const HashedKey key(k);
    return engine.keyspace().Lock(key).Get(key);
  };
  EXPECT_EQ(get("a"), 10);
  EXPECT_EQ(get("b"), 2);
  EXPECT_EQ(get("c"), std::nullopt);
  EXPECT_EQ(get("d"), std::nullopt);
  EXPECT_EQ(get("e"), 5);
  {
    const HashedKey key("b");
    EXPECT_EQ(engine.keyspace().Lock(key).DeadlineMillis(key), kStart + 1000);
  }
  // The expired counter is deleted from the store without any write to prompt it.
  EXPECT_TRUE(store.WaitForData([](const auto& data) { return !data.contains("d"); }));
  // What came from the log reaches the tables with the next checkpoint.
  ASSERT_TRUE(engine.committer().CheckpointNow().has_value());
  const auto tables = store.tables();
  EXPECT_EQ(store.log_size(), 0u);
  ASSERT_EQ(tables.size(), 3u);
  EXPECT_EQ(tables.at("a").value, 10);
  EXPECT_EQ(tables.at("b").value, 2);
  EXPECT_EQ(tables.at("b").deadline_ms, kStart + 1000);
  EXPECT_EQ(tables.at("e").value, 5);
  engine.Stop();
}

TEST(Engine, ClearAllInTheLogDropsTheTable) {
  ManualClock clock(kStart);
  FakePersistence store;
  store.Preload("old", CounterRecord{1, 0});
  store.AddLogged({FakePersistence::LoggedOp::kClearAll, "", {}});
  store.AddLogged({FakePersistence::LoggedOp::kPut, "new", CounterRecord{2, 0}});
  Engine engine(&store, EngineOptions{.commit = {}, .clock = &clock});
  ASSERT_TRUE(engine.Start().has_value());
  EXPECT_EQ(engine.loaded_counters(), 1u);
  const HashedKey old_key("old");
  EXPECT_FALSE(engine.keyspace().Lock(old_key).Exists(old_key));
  ASSERT_TRUE(engine.committer().CheckpointNow().has_value());
  const auto tables = store.tables();
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables.at("new").value, 2);
}

TEST(Engine, RestartReadsBackWhatWasWritten) {
  ManualClock clock(kStart);
  FakePersistence store;
  {
    Engine engine(&store, EngineOptions{.commit = {}, .clock = &clock});
    ASSERT_TRUE(engine.Start().has_value());
    IncrementBuffer buffer(&engine.keyspace());
    for (int i = 0; i < 1000; ++i) buffer.Add(HashedKey("k:" + std::to_string(i % 100)), i);
    const uint64_t epoch = buffer.Publish();
    EXPECT_FALSE(engine.IsDurable(epoch + 1));
    engine.committer().WaitDurable(epoch);
    EXPECT_TRUE(engine.IsDurable(epoch));
    const HashedKey ttl("ttl");
    const HashedKey gone("k:0");
    View view = engine.keyspace().Lock(std::vector<HashedKey>{ttl, gone});
    ASSERT_TRUE(view.IncrByWithExpiry(ttl, 3, kStart + 5000, false).has_value());
    ASSERT_TRUE(view.Delete(gone));
  }  // the view is released, then the engine stops and commits the rest
  EXPECT_EQ(store.log_size(), 0u);  // and writes a last checkpoint
  Engine engine(&store, EngineOptions{.commit = {}, .clock = &clock});
  ASSERT_TRUE(engine.Start().has_value());
  EXPECT_EQ(engine.loaded_counters(), 100u);
  for (int k = 1; k < 100; ++k) {
    const std::string name = "k:" + std::to_string(k);
    const HashedKey key(name);
    // Key k got i = k, k + 100, ..., k + 900.
    EXPECT_EQ(engine.keyspace().Lock(key).Get(key), 10 * k + 4500) << name;
  }
  const HashedKey ttl("ttl");
  EXPECT_EQ(engine.keyspace().Lock(ttl).Get(ttl), 3);
  EXPECT_EQ(engine.keyspace().Lock(ttl).DeadlineMillis(ttl), kStart + 5000);
}

TEST(Engine, AsyncEnginesTreatEveryEpochAsDurable) {
  FakePersistence store;
  Engine engine(&store, EngineOptions{.commit = {.durability = Durability::kAsync}});
  ASSERT_TRUE(engine.Start().has_value());
  EXPECT_EQ(engine.durability(), Durability::kAsync);
  EXPECT_TRUE(engine.IsDurable(1'000'000));
}

// Writers that wait for durability before "replying", as the servers do: every value they
// saw must be in the store by then, and at the end the store holds the exact sum.
TEST(Engine, AcknowledgedIncrementsAreInTheStore) {
  FakePersistence store;
  Engine engine(&store, EngineOptions{});
  ASSERT_TRUE(engine.Start().has_value());
  constexpr int kWriters = 4;
  const int turns = kSanitized ? 100 : 500;
  std::atomic<int> violations{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      IncrementBuffer buffer(&engine.keyspace());
      for (int turn = 0; turn < turns; ++turn) {
        uint32_t last = 0;
        for (int j = 0; j < 16; ++j) last = buffer.Add(HashedKey("hot"), 1);
        buffer.Add(HashedKey("w:" + std::to_string(w)), 1);
        const uint64_t epoch = buffer.Publish();
        engine.committer().WaitDurable(epoch);
        if (!engine.IsDurable(epoch)) violations++;
        const std::optional<CounterRecord> stored = store.Stored("hot");
        if (!stored || stored->value < buffer.outcome(last).value) violations++;
        buffer.Clear();
      }
    });
  }
  for (std::thread& t : writers) t.join();
  engine.Stop();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(store.Stored("hot")->value, int64_t{kWriters} * turns * 16);
  for (int w = 0; w < kWriters; ++w)
    EXPECT_EQ(store.Stored("w:" + std::to_string(w))->value, turns);
}

// ---- Keyspace under concurrency ----------------------------------------------------------

// The drained batches applied in order to a model of the store, with the hot key's value
// after each epoch.
struct StoreModel {
  std::map<std::string, CounterRecord> data;
  std::vector<std::pair<uint64_t, int64_t>> hot_after;  // (epoch, hot value once applied)
  bool epochs_consecutive = true;

  // Drains one epoch; false when nothing was written in it.
  bool DrainFrom(Keyspace& keyspace, const std::string& hot) {
    CommitBatch batch;
    if (!keyspace.Drain(&batch)) return false;
    const uint64_t expected = hot_after.empty() ? 1 : hot_after.back().first + 1;
    if (batch.epoch() != expected) epochs_consecutive = false;
    ApplyBatch(batch, &data);
    const auto it = data.find(hot);
    hot_after.emplace_back(batch.epoch(), it == data.end() ? 0 : it->second.value);
    return true;
  }

  // The hot value in the store once `epoch` is durable.
  std::optional<int64_t> HotAt(uint64_t epoch) const {
    if (epoch == 0 || epoch > hot_after.size()) return std::nullopt;
    return hot_after[epoch - 1].second;
  }
};

// Runs `writers` threads of `turns` turns, each turn `per_turn` increments through the
// thread's own IncrementBuffer (half on one hot key, half on random keys) and then Publish,
// with a direct multi-key write now and then; meanwhile a drainer and two readers.
void RunIncrementStorm(int per_turn, int turns) {
  ManualClock clock(kStart);
  Keyspace keyspace(&clock);
  constexpr int kWriters = 4;
  constexpr size_t kRandomKeys = 5000;
  const std::string hot_name = "hot";
  const HashedKey hot(hot_name);
  std::vector<std::string> names;
  for (size_t i = 0; i < kRandomKeys; ++i) {
    names.push_back("r:" + std::to_string(i) + (i % 8 == 0 ? std::string(20, 'x') : ""));
  }

  struct WriterState {
    std::vector<int64_t> sums = std::vector<int64_t>(kRandomKeys);
    std::vector<bool> touched = std::vector<bool>(kRandomKeys);
    int64_t hot_sum = 0;
    std::vector<int64_t> hot_outcomes;               // every value the hot key took
    std::vector<std::pair<uint64_t, int64_t>> acks;  // (required epoch, hot value seen)
    int errors = 0;
  };
  std::vector<WriterState> states(kWriters);
  std::atomic<bool> writers_done{false};

  auto writer = [&](int w) {
    WriterState& state = states[w];
    std::mt19937_64 rng(1000 + w);
    IncrementBuffer buffer(&keyspace);
    std::vector<uint32_t> hot_tickets;
    for (int turn = 0; turn < turns; ++turn) {
      hot_tickets.clear();
      for (int j = 0; j < per_turn; ++j) {
        if (rng() % 2 == 0) {
          const auto delta = static_cast<int64_t>(1 + rng() % 3);
          hot_tickets.push_back(buffer.Add(hot, delta));
          state.hot_sum += delta;
        } else {
          const size_t k = rng() % kRandomKeys;
          const auto delta = static_cast<int64_t>(rng() % 11) - 5;
          buffer.Add(HashedKey(names[k]), delta);
          state.sums[k] += delta;
          state.touched[k] = true;
        }
      }
      const uint64_t required = buffer.Publish();
      if (required == 0) state.errors++;
      int64_t previous = INT64_MIN;
      for (uint32_t ticket : hot_tickets) {
        const IncrementOutcome& outcome = buffer.outcome(ticket);
        if (outcome.overflow || outcome.value <= previous) state.errors++;
        previous = outcome.value;
        state.hot_outcomes.push_back(outcome.value);
      }
      if (!hot_tickets.empty()) state.acks.emplace_back(required, previous);
      buffer.Clear();

      if (turn % 8 == 0) {  // a transaction over several stripes, as MULTI/EXEC would do
        const size_t a = rng() % kRandomKeys;
        const size_t b = rng() % kRandomKeys;
        const std::vector<HashedKey> keys = {HashedKey(names[a]), hot, HashedKey(names[b])};
        View view = keyspace.Lock(keys);
        if (!view.IncrBy(keys[0], 1) || !view.IncrBy(keys[2], 1)) state.errors++;
        const Result<int64_t> value = view.IncrBy(hot, 1);
        if (!value) {
          state.errors++;
        } else {
          state.hot_outcomes.push_back(*value);
          state.acks.emplace_back(view.required_epoch(), *value);
        }
        state.sums[a] += 1;
        state.sums[b] += 1;
        state.touched[a] = state.touched[b] = true;
        state.hot_sum += 1;
      }
    }
  };

  StoreModel model;
  std::thread drainer([&] {
    while (!writers_done.load(std::memory_order_acquire)) {
      if (!model.DrainFrom(keyspace, hot_name)) std::this_thread::yield();
      keyspace.ReclaimExpired(100);  // nothing expires here: must not disturb anything
    }
  });

  struct ReaderState {
    std::vector<std::pair<uint64_t, int64_t>> seen;  // (required epoch, value)
    int went_down = 0;                               // the hot key's value decreased
    int scan_missed = 0;  // a full scan did not return the hot key exactly once
    int scan_extra = 0;   // a full scan returned more keys than are held
    int scans = 0;
  };
  std::vector<ReaderState> readers_state(2);
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      ReaderState& state = readers_state[r];
      int64_t last = 0;
      for (int i = 0; !writers_done.load(std::memory_order_acquire); ++i) {
        std::optional<int64_t> value;
        uint64_t required;
        {
          View view = keyspace.Lock(hot);
          value = view.Get(hot);
          required = view.required_epoch();
        }
        if (value) {
          if (*value < last) state.went_down++;  // the hot key only grows
          last = *value;
          state.seen.emplace_back(required, *value);
        }
        if (r == 1 && i % 64 == 0) {
          // A full SCAN while everything moves: the hot key, present throughout once seen,
          // is returned exactly once.
          const bool present = value.has_value();
          std::vector<std::string> keys;
          uint64_t cursor = 0;
          do {
            cursor = keyspace.Scan(cursor, 200, nullptr, &keys);
          } while (cursor != 0);
          if (present && std::count(keys.begin(), keys.end(), hot_name) != 1) state.scan_missed++;
          // Nothing is deleted here, so every key returned is still held.
          if (keyspace.size() < keys.size()) state.scan_extra++;
          if (!keys.empty() && keyspace.memory_bytes() == 0) state.scan_extra++;
          state.scans++;
        }
        std::this_thread::yield();
      }
    });
  }

  std::vector<std::thread> writer_threads;
  for (int w = 0; w < kWriters; ++w) writer_threads.emplace_back(writer, w);
  for (std::thread& t : writer_threads) t.join();
  writers_done.store(true, std::memory_order_release);
  drainer.join();
  for (std::thread& t : readers) t.join();
  while (model.DrainFrom(keyspace, hot_name)) {
  }

  int64_t hot_total = 0;
  std::vector<int64_t> totals(kRandomKeys);
  std::vector<bool> touched(kRandomKeys);
  std::vector<int64_t> hot_outcomes;
  for (const WriterState& state : states) {
    EXPECT_EQ(state.errors, 0);
    hot_total += state.hot_sum;
    for (size_t k = 0; k < kRandomKeys; ++k) {
      totals[k] += state.sums[k];
      touched[k] = touched[k] || state.touched[k];
    }
    hot_outcomes.insert(hot_outcomes.end(), state.hot_outcomes.begin(), state.hot_outcomes.end());
  }
  for (const ReaderState& state : readers_state) {
    EXPECT_EQ(state.went_down, 0);
    EXPECT_EQ(state.scan_missed, 0);
    EXPECT_EQ(state.scan_extra, 0);
  }
  EXPECT_GT(readers_state[1].scans, 0);

  // The keyspace and the store model both hold the exact sums.
  auto get = [&](const std::string& name) {
    const HashedKey key(name);
    return keyspace.Lock(key).Get(key);
  };
  EXPECT_EQ(get(hot_name), hot_total);
  ASSERT_TRUE(model.data.contains(hot_name));
  EXPECT_EQ(model.data.at(hot_name).value, hot_total);
  size_t present = 1;
  for (size_t k = 0; k < kRandomKeys; ++k) {
    if (!touched[k]) {
      EXPECT_EQ(get(names[k]), std::nullopt) << names[k];
      EXPECT_FALSE(model.data.contains(names[k])) << names[k];
      continue;
    }
    ++present;
    EXPECT_EQ(get(names[k]), totals[k]) << names[k];
    ASSERT_TRUE(model.data.contains(names[k])) << names[k];
    EXPECT_EQ(model.data.at(names[k]).value, totals[k]) << names[k];
  }
  EXPECT_EQ(keyspace.size(), present);
  EXPECT_EQ(model.data.size(), present);
  EXPECT_TRUE(model.epochs_consecutive);

  // Every increment of the hot key saw a value of its own: the folds never interleaved.
  std::sort(hot_outcomes.begin(), hot_outcomes.end());
  EXPECT_EQ(std::adjacent_find(hot_outcomes.begin(), hot_outcomes.end()), hot_outcomes.end());
  ASSERT_FALSE(hot_outcomes.empty());
  EXPECT_EQ(hot_outcomes.back(), hot_total);

  // A value revealed with required epoch E is in the store once E is durable.
  int late = 0;
  auto check_durable = [&](uint64_t epoch, int64_t value) {
    const std::optional<int64_t> stored = model.HotAt(epoch);
    if (!stored || *stored < value) late++;
  };
  for (const WriterState& state : states) {
    for (const auto& [epoch, value] : state.acks) check_durable(epoch, value);
  }
  for (const ReaderState& state : readers_state) {
    for (const auto& [epoch, value] : state.seen) check_durable(epoch, value);
  }
  EXPECT_EQ(late, 0);
}

TEST(KeyspaceConcurrency, TurnsOf64IncrementsAddUpExactly) {
  RunIncrementStorm(/*per_turn=*/64, /*turns=*/kSanitized ? 300 : 8000);
}

TEST(KeyspaceConcurrency, PublishingEveryIncrementAddsUpExactly) {
  RunIncrementStorm(/*per_turn=*/1, /*turns=*/kSanitized ? 3000 : 100'000);
}

// Writers doing every kind of write, FLUSHALL included, while a drainer commits: at the end
// the model of the store, built only from the drained batches, equals the keyspace.
TEST(KeyspaceConcurrency, DrainedBatchesReproduceTheKeyspace) {
  ManualClock clock(kStart);
  Keyspace keyspace(&clock);
  constexpr int kWriters = 3;
  const int ops = kSanitized ? 5000 : 50000;
  constexpr size_t kKeys = 300;
  std::vector<std::string> names;
  for (size_t i = 0; i < kKeys; ++i) names.push_back("m:" + std::to_string(i));

  std::atomic<bool> done{false};
  StoreModel model;
  std::thread drainer([&] {
    while (!done.load(std::memory_order_acquire)) {
      if (!model.DrainFrom(keyspace, "none")) std::this_thread::yield();
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937_64 rng(77 + w);
      IncrementBuffer buffer(&keyspace);
      for (int i = 0; i < ops; ++i) {
        const HashedKey key(names[rng() % kKeys]);
        const int64_t deadline = kStart + 1000 + static_cast<int64_t>(rng() % 1000);
        switch (rng() % 10) {
          case 0:
          case 1: {
            View view = keyspace.Lock(key);
            (void)view.IncrBy(key, 1);
            break;
          }
          case 2: {
            View view = keyspace.Lock(key);
            view.Set(key, static_cast<int64_t>(rng() % 100), SetOptions{});
            break;
          }
          case 3: {
            View view = keyspace.Lock(key);
            view.Set(key, 5,
                     SetOptions{.expiry = ExpiryAction::kSetDeadline, .deadline_ms = deadline});
            break;
          }
          case 4: {
            View view = keyspace.Lock(key);
            view.Delete(key);
            break;
          }
          case 5: {
            View view = keyspace.Lock(key);
            view.Expire(key, deadline, ExpireCondition::kAlways);
            break;
          }
          case 6: {
            View view = keyspace.Lock(key);
            view.Persist(key);
            break;
          }
          case 7: {
            View view = keyspace.Lock(key);
            (void)view.IncrByWithExpiry(key, 2, deadline, true);
            break;
          }
          case 8: {
            for (int j = 0; j < 8; ++j) buffer.Add(HashedKey(names[rng() % kKeys]), 1);
            buffer.Publish();
            buffer.Clear();
            break;
          }
          default: {
            if (rng() % 200 == 0) {
              View all = keyspace.LockAll();
              all.FlushAll();
            } else {
              View view = keyspace.Lock(key);
              view.Set(key, 1, SetOptions{.condition = SetCondition::kIfMissing});
            }
          }
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  done.store(true, std::memory_order_release);
  drainer.join();
  while (model.DrainFrom(keyspace, "none")) {
  }
  EXPECT_TRUE(model.epochs_consecutive);

  std::map<std::string, CounterRecord> actual;
  for (const std::string& name : names) {
    const HashedKey key(name);
    View view = keyspace.Lock(key);
    const std::optional<int64_t> value = view.Get(key);
    if (!value) continue;
    const int64_t deadline = view.DeadlineMillis(key);
    actual[name] = CounterRecord{*value, deadline < 0 ? 0 : deadline};
  }
  ASSERT_EQ(model.data.size(), actual.size());
  EXPECT_EQ(keyspace.size(), actual.size());
  for (const auto& [name, record] : actual) {
    ASSERT_TRUE(model.data.contains(name)) << name;
    EXPECT_EQ(model.data.at(name).value, record.value) << name;
    EXPECT_EQ(model.data.at(name).deadline_ms, record.deadline_ms) << name;
  }
}

}  // namespace
}  // namespace tally::engine
