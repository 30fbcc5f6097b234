// Tests of the group committer and its checkpoints over an in-memory Persistence: epochs
// announced in order and only once durable, failed commits retried, sync and async modes,
// and checkpoints that lose nothing while writers write. Run them under TSan too.
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
#include "engine/engine_test_support.h"

namespace tally::engine {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

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
  // Records the epochs of the batches observers see, and counts announcements that came
  // before the store had fsync'd every commit up to the epoch.
  void WatchAnnouncements() {
    committer_->AddCommitObserver([this](const CommitBatch& batch, uint64_t) {
      std::lock_guard lock(listened_mutex_);
      observed_.push_back(batch.epoch());
    });
    committer_->AddDurableListener([this](uint64_t epoch) {
      for (const auto& commit : store_.commits()) {
        if (commit.epoch <= epoch && !commit.synced) premature_.fetch_add(1);
      }
    });
  }
  // Starts a committer whose announcements are recorded and checked (above).
  void StartWatched(CommitterOptions options = {}) {
    MakeCommitter(options);
    ListenForEpochs();
    WatchAnnouncements();
    committer_->Start();
  }
  std::vector<uint64_t> observed() {
    std::lock_guard lock(listened_mutex_);
    return observed_;
  }
  // Writes a change and commits it on this thread; returns its epoch once it is written.
  // REQUIRES: the committer thread's timer is off (kTimerOff), so that this thread commits.
  uint64_t WriteAndCommit(std::string_view key, int64_t delta) {
    const uint64_t epoch = IncrBy(key, delta);
    committer_->TryCommitNow();
    EXPECT_TRUE(store_.WaitForCommit(epoch)) << epoch;
    return epoch;
  }
  static constexpr CommitterOptions kTimerOff{.reclaim_interval_ms = 60'000};

  ManualClock clock_{kStart};
  Keyspace keyspace_{&clock_};
  FakePersistence store_;
  std::mutex listened_mutex_;
  std::vector<uint64_t> announced_;
  std::vector<uint64_t> observed_;
  std::atomic<int> premature_{0};
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
  for (const auto& commit : store_.commits()) EXPECT_TRUE(commit.synced) << commit.epoch;
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
  EXPECT_TRUE(Eventually([&] { return store_.all_synced(); }));
  const auto commits = store_.commits();
  ASSERT_EQ(commits.size(), 1u);
  EXPECT_TRUE(commits.front().synced);
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

// A commit made inline (WaitDurable/TryCommitNow) in async mode is fsync'd on the
// interval like the committer thread's own.
TEST_F(CommitterTest, AsyncModeSyncsInlineCommitsPeriodically) {
  StartCommitter(CommitterOptions{.durability = Durability::kAsync, .sync_interval_ms = 20});
  keyspace_.set_on_write({});  // so that only the inline commit below writes the batch
  committer_->WaitDurable(IncrBy("k", 1));
  ASSERT_FALSE(store_.commits().empty());
  EXPECT_TRUE(Eventually([&] { return store_.all_synced(); }, 1000ms))
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

// ---- The sync thread: the fsync of commit N overlaps the writing of N+1 -----------------

TEST_F(CommitterTest, TheNextCommitGoesOnWhileTheLastFsyncRuns) {
  StartWatched(kTimerOff);
  store_.SetSyncHeld(true);
  const uint64_t first = WriteAndCommit("k", 1);
  ASSERT_TRUE(store_.WaitForBlockedSync());  // the sync thread's fsync of `first` waits
  // Neither the writer of `first` nor the next committer waits for that fsync: the next
  // commit is left to the sync thread (TryCommitNow returns at once, true).
  const uint64_t second = IncrBy("k", 2);
  const uint64_t other_epoch = IncrBy("other", 4);
  EXPECT_EQ(other_epoch, second);
  EXPECT_TRUE(committer_->TryCommitNow());
  EXPECT_TRUE(committer_->TryCommitNow());
  EXPECT_GT(second, first);
  EXPECT_LT(committer_->durable_epoch(), first);
  EXPECT_TRUE(announced().empty());
  EXPECT_TRUE(observed().empty());
  EXPECT_FALSE(store_.all_synced());

  store_.SetSyncHeld(false);
  committer_->WaitDurable(second);
  EXPECT_EQ(committer_->durable_epoch(), second);
  committer_->Stop();
  EXPECT_EQ(announced(), (std::vector<uint64_t>{first, second}));
  EXPECT_EQ(observed(), (std::vector<uint64_t>{first, second}));
  EXPECT_EQ(premature_.load(), 0);
  // The blocked fsync began before `second` was written, so a second one covered it; both
  // requests for `second` made one write.
  std::vector<uint64_t> written;
  for (const auto& commit : store_.commits()) written.push_back(commit.epoch);
  EXPECT_EQ(written, (std::vector<uint64_t>{first, second}));
  EXPECT_EQ(committer_->stats().syncs, 2u);
  EXPECT_EQ(committer_->stats().commits, 2u);
  EXPECT_TRUE(store_.all_synced());
  EXPECT_EQ(store_.Stored("k")->value, 3);
  EXPECT_EQ(store_.Stored("other")->value, 4);
}

TEST_F(CommitterTest, AFailedFsyncAnnouncesNothingAndIsRetriedAfterWritingAgain) {
  StartWatched(kTimerOff);
  store_.SetSyncFailing(true);
  const uint64_t epoch = WriteAndCommit("k", 5);
  ASSERT_TRUE(store_.WaitForSyncFailures(2));
  EXPECT_LT(committer_->durable_epoch(), epoch);
  EXPECT_TRUE(announced().empty());
  EXPECT_TRUE(observed().empty());
  EXPECT_TRUE(Eventually([&] { return committer_->stats().failures >= 2; }));
  EXPECT_FALSE(committer_->stats().healthy);
  // Each failed fsync had the batch written again (the kernel may have dropped its pages).
  EXPECT_TRUE(Eventually([&] {
    const auto commits = store_.commits();
    return std::count_if(commits.begin(), commits.end(),
                         [&](const auto& commit) { return commit.epoch == epoch; }) >= 2;
  }));

  store_.SetSyncFailing(false);
  committer_->WaitDurable(epoch);
  committer_->Stop();
  EXPECT_EQ(announced(), (std::vector<uint64_t>{epoch}));
  EXPECT_EQ(observed(), (std::vector<uint64_t>{epoch}));
  EXPECT_EQ(premature_.load(), 0);
  EXPECT_TRUE(committer_->stats().healthy);
  EXPECT_TRUE(store_.all_synced());
  EXPECT_EQ(store_.Stored("k")->value, 5);
}

TEST_F(CommitterTest, StopDuringAnFsyncLeavesEverythingDurableAndAnnounced) {
  StartWatched(kTimerOff);
  store_.SetSyncHeld(true);
  WriteAndCommit("a", 1);
  ASSERT_TRUE(store_.WaitForBlockedSync());
  IncrBy("b", 2);
  EXPECT_TRUE(committer_->TryCommitNow());  // left to the sync thread
  IncrBy("c", 3);                           // nobody asked for it: Stop writes it
  std::thread stopper([&] { committer_->Stop(); });
  store_.SetSyncHeld(false);
  stopper.join();
  const uint64_t last = keyspace_.open_epoch() - 1;
  EXPECT_EQ(committer_->durable_epoch(), last);
  EXPECT_TRUE(store_.all_synced());
  EXPECT_EQ(Snap(store_.data()), (Snapshot{{"a", {1, 0}}, {"b", {2, 0}}, {"c", {3, 0}}}));
  std::vector<uint64_t> every(last);
  for (uint64_t epoch = 1; epoch <= last; ++epoch) every[epoch - 1] = epoch;
  EXPECT_EQ(announced(), every);
  EXPECT_EQ(observed(), every);
  EXPECT_EQ(premature_.load(), 0);
}

TEST_F(CommitterTest, ThreadsCommittingAtOnceHaveEveryEpochAnnouncedOnceInOrder) {
  StartWatched();
  const int rounds = kSanitized ? 100 : 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string key = "t:" + std::to_string(t);
      for (int i = 0; i < rounds; ++i) {
        const uint64_t epoch = IncrBy(key, 1);
        if (i % 2 == 0) committer_->TryCommitNow();
        committer_->WaitDurable(epoch);
        EXPECT_GE(committer_->durable_epoch(), epoch);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  committer_->Stop();
  const std::vector<uint64_t> epochs = announced();
  ASSERT_FALSE(epochs.empty());
  for (size_t i = 0; i < epochs.size(); ++i) ASSERT_EQ(epochs[i], i + 1) << "in order, once";
  EXPECT_EQ(observed(), epochs);
  EXPECT_EQ(premature_.load(), 0);
  EXPECT_TRUE(store_.all_synced());
  for (int t = 0; t < 4; ++t) EXPECT_EQ(store_.Stored("t:" + std::to_string(t))->value, rounds);
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

// The store's cut runs between BeginCheckpoint and the first write, with every stripe held: a
// writer started inside it gets in only after it returned.
TEST_F(CommitterTest, TheStoreTakesItsCutWithEveryStripeHeld) {
  StartCommitter();
  const HashedKey key("a");
  uint64_t epoch;
  {
    View view = keyspace_.Lock(key);
    ASSERT_TRUE(view.IncrBy(key, 1).has_value());
    epoch = view.required_epoch();
  }
  committer_->WaitDurable(epoch);
  std::atomic<bool> write_done{false};
  bool done_inside = true;
  uint64_t ops_at_cut = 1;
  std::thread writer;
  store_.SetOnCut([&](uint64_t) {
    writer = std::thread([&] {
      ASSERT_TRUE(keyspace_.Lock(key).IncrBy(key, 1).has_value());
      write_done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    done_inside = write_done.load();
    ops_at_cut = store_.checkpoint_ops();
  });
  const Status checkpoint = committer_->CheckpointNow();
  store_.SetOnCut(nullptr);  // Stop's last checkpoint must not run it again
  writer.join();
  ASSERT_TRUE(checkpoint.has_value());
  EXPECT_FALSE(done_inside);
  EXPECT_EQ(ops_at_cut, 0u);
  EXPECT_EQ(store_.cuts(), std::vector<uint64_t>{1});  // the token: one operation logged
  EXPECT_EQ(keyspace_.Lock(key).Get(key), 2);
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

}  // namespace
}  // namespace tally::engine
