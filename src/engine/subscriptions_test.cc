#include "engine/subscriptions.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace tally::engine {
namespace {

constexpr int64_t kStart = 1'700'000'000'000;  // the ManualClock's start, Unix ms

// Records what the hub hands over. Deliveries are kept (the subscriber's thread has not
// taken them) until Take() releases them.
class RecordingSink final : public SubscriberSink {
 public:
  void Deliver(SubscriptionDelivery delivery) override {
    std::lock_guard lock(mutex_);
    held_.push_back(std::move(delivery));
  }
  void Disconnect(std::string reason) override {
    std::lock_guard lock(mutex_);
    reasons_.push_back(std::move(reason));
  }

  // The updates of every delivery so far, in order, as key -> values; releases them.
  std::map<std::string, std::vector<int64_t>> Take() {
    std::lock_guard lock(mutex_);
    std::map<std::string, std::vector<int64_t>> values;
    for (const SubscriptionDelivery& delivery : held_) {
      for (const SubscriptionUpdate& update : delivery.updates()) {
        values[update.key].push_back(update.value);
      }
    }
    held_.clear();
    return values;
  }
  // The updates of every delivery so far, as handed over; releases them.
  std::vector<SubscriptionUpdate> TakeUpdates() {
    std::lock_guard lock(mutex_);
    std::vector<SubscriptionUpdate> updates;
    for (const SubscriptionDelivery& delivery : held_) {
      updates.insert(updates.end(), delivery.updates().begin(), delivery.updates().end());
    }
    held_.clear();
    return updates;
  }
  size_t held() {
    std::lock_guard lock(mutex_);
    return held_.size();
  }
  std::vector<std::string> reasons() {
    std::lock_guard lock(mutex_);
    return reasons_;
  }

 private:
  std::mutex mutex_;
  std::vector<SubscriptionDelivery> held_;
  std::vector<std::string> reasons_;
};

using Values = std::map<std::string, std::vector<int64_t>>;

class SubscriptionHubTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeHub({}); }

  void MakeHub(SubscriptionOptions options) {
    hub_ = std::make_unique<SubscriptionHub>(&keyspace_, std::move(options));
  }

  void Set(std::string_view k, int64_t value) {
    const HashedKey key(k);
    keyspace_.Lock(key).Set(key, value, {});
  }
  void Delete(std::string_view k) {
    const HashedKey key(k);
    keyspace_.Lock(key).Delete(key);
  }
  // Closes the open epoch into a batch, as the committer does (without writing it).
  CommitBatch Drain() {
    CommitBatch batch;
    keyspace_.Drain(&batch);
    return batch;
  }
  // Drains and announces the batch as durable.
  void Commit() { hub_->OnCommit(Drain()); }

  // A subscriber with its sink.
  std::pair<SubscriberId, std::shared_ptr<RecordingSink>> Subscriber() {
    auto sink = std::make_shared<RecordingSink>();
    return {hub_->AddSubscriber(sink), sink};
  }
  Status Subscribe(SubscriberId id, std::vector<std::string> keys,
                   std::vector<std::string> prefixes = {}) {
    return hub_->Subscribe(id, keys, prefixes);
  }

  ManualClock clock_{kStart};
  Keyspace keyspace_{&clock_};
  std::unique_ptr<SubscriptionHub> hub_;
};

TEST_F(SubscriptionHubTest, AKeyGetsItsCurrentValueFirstThenEveryNewValue) {
  Set("likes:7", 5);
  Commit();
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"likes:7", "likes:8"}));
  hub_->Flush();
  // A missing counter's current value is 0.
  EXPECT_EQ(sink->Take(), (Values{{"likes:7", {5}}, {"likes:8", {0}}}));

  Set("likes:7", 6);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"likes:7", {6}}}));
  hub_->Flush();
  EXPECT_EQ(sink->Take(), Values{});
}

TEST_F(SubscriptionHubTest, ValuesCoalesceToTheLatestPerInterval) {
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"hot"}));
  hub_->Flush();
  sink->Take();
  for (int i = 1; i <= 100; ++i) {
    Set("hot", i);
    Commit();
  }
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"hot", {100}}}));
}

TEST_F(SubscriptionHubTest, ASubscriberThatHasNotTakenItsDeliveryKeepsCoalescing) {
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"k"}));
  hub_->Flush();
  ASSERT_EQ(sink->held(), 1u);  // not taken yet
  Set("k", 1);
  Commit();
  hub_->Flush();
  Set("k", 2);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->held(), 1u);
  EXPECT_EQ(hub_->stats().pending_keys, 1u);
  EXPECT_EQ(sink->Take(), (Values{{"k", {0}}}));
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"k", {2}}}));
}

TEST_F(SubscriptionHubTest, AnUnchangedValueIsNotSentAgain) {
  Set("k", 5);
  Commit();
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"k"}));
  hub_->Flush();
  sink->Take();
  Set("k", 6);
  Commit();
  Set("k", 5);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), Values{});
  // Subscribing again asks for the current value: sent even though unchanged.
  ASSERT_TRUE(Subscribe(id, {"k"}));
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"k", {5}}}));
}

TEST_F(SubscriptionHubTest, PrefixesMatchEveryKeyOfTheFamilyOnce) {
  Set("likes:7", 1);
  Set("likes:8", 2);
  Set("liked", 3);
  Set("other", 4);
  Commit();
  auto [a, sink_a] = Subscriber();
  auto [b, sink_b] = Subscriber();
  auto [c, sink_c] = Subscriber();
  // Overlapping prefixes of one subscriber give one update per key.
  ASSERT_TRUE(Subscribe(a, {"likes:7"}, {"likes:", "like"}));
  ASSERT_TRUE(Subscribe(b, {}, {"likes:8"}));
  ASSERT_TRUE(Subscribe(c, {}, {""}));  // everything
  hub_->Flush();
  EXPECT_EQ(sink_a->Take(), (Values{{"likes:7", {1}}, {"likes:8", {2}}, {"liked", {3}}}));
  EXPECT_EQ(sink_b->Take(), (Values{{"likes:8", {2}}}));
  EXPECT_EQ(sink_c->Take(),
            (Values{{"likes:7", {1}}, {"likes:8", {2}}, {"liked", {3}}, {"other", {4}}}));

  Set("likes:80", 10);
  Set("lik", 11);
  Set("other", 12);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink_a->Take(), (Values{{"likes:80", {10}}}));
  EXPECT_EQ(sink_b->Take(), (Values{{"likes:80", {10}}}));
  EXPECT_EQ(sink_c->Take(), (Values{{"likes:80", {10}}, {"lik", {11}}, {"other", {12}}}));
}

TEST_F(SubscriptionHubTest, APrefixFollowsTheKeysOfItsOwnDatabaseOnly) {
  const std::string likes2 = StoredKey(2, "likes:7");
  const std::string likes3 = StoredKey(3, "likes:7");
  Set("likes:7", 1);
  Set(likes2, 2);
  Set(likes3, 3);
  Commit();
  auto [zero, sink_zero] = Subscriber();
  auto [nul, sink_nul] = Subscriber();
  auto [two, sink_two] = Subscriber();
  ASSERT_TRUE(Subscribe(zero, {}, {""}));  // every key of database 0
  ASSERT_TRUE(Subscribe(nul, {}, {std::string("\0d", 2)}));
  ASSERT_TRUE(Subscribe(two, {}, {StoredKey(2, "")}));  // every key of database 2
  hub_->Flush();
  EXPECT_EQ(sink_zero->Take(), (Values{{"likes:7", {1}}}));
  EXPECT_EQ(sink_nul->Take(), Values{});
  EXPECT_EQ(sink_two->Take(), (Values{{likes2, {2}}}));

  Set("likes:7", 10);
  Set(likes2, 20);
  Set(likes3, 30);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink_zero->Take(), (Values{{"likes:7", {10}}}));
  EXPECT_EQ(sink_nul->Take(), Values{});
  EXPECT_EQ(sink_two->Take(), (Values{{likes2, {20}}}));
}

TEST_F(SubscriptionHubTest, APrefixSendsAtMostSnapshotMaxKeysFirst) {
  SubscriptionOptions options;
  options.snapshot_max_keys = 10;
  MakeHub(options);
  for (int i = 0; i < 50; ++i) Set("f:" + std::to_string(i), i + 1);
  Set("g:1", 1);
  Commit();
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {}, {"f:"}));
  hub_->Flush();
  const Values first = sink->Take();
  EXPECT_EQ(first.size(), 10u);
  for (const auto& [key, values] : first) {
    ASSERT_TRUE(key.starts_with("f:"));
    EXPECT_EQ(values, std::vector<int64_t>{std::stoi(key.substr(2)) + 1});
  }
  // The rest of the family arrives as it changes.
  Set("f:49", 100);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"f:49", {100}}}));
}

TEST_F(SubscriptionHubTest, DeletedAndExpiredCountersBecomeZero) {
  Set("a", 1);
  const HashedKey b("b");
  keyspace_.Lock(b).Set(
      b, 2, SetOptions{.expiry = ExpiryAction::kSetDeadline, .deadline_ms = kStart + 10});
  Commit();
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"a", "b"}));
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"a", {1}}, {"b", {2}}}));
  Delete("a");
  clock_.Advance(20);
  keyspace_.ReclaimExpired(100);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"a", {0}}, {"b", {0}}}));
}

TEST_F(SubscriptionHubTest, FlushAllZeroesEveryFollowedKeyThatHadAValue) {
  Set("f:1", 1);
  Set("f:2", 2);
  Set("x", 3);
  Commit();
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"x", "zero"}, {"f:"}));
  hub_->Flush();
  sink->Take();
  Set("f:3", 3);  // pending, not sent yet, when FLUSHALL comes
  Commit();
  keyspace_.LockAll().FlushAll();
  Set("f:1", 7);  // after the FLUSHALL, in the same batch
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"f:1", {7}}, {"f:2", {0}}, {"x", {0}}}));
}

TEST_F(SubscriptionHubTest, ACurrentValueIsNotReplacedByAnOlderUpdateAndWaitsForDurability) {
  Set("k", 1);
  CommitBatch older = Drain();  // epoch 1: k = 1, not announced yet
  Set("k", 2);                  // epoch 2, open
  auto [id, sink] = Subscriber();
  hub_->SetDurableEpoch(0);
  ASSERT_TRUE(Subscribe(id, {"k"}));  // reads 2, from epoch 2
  hub_->OnCommit(older);              // the older batch arrives after the read
  hub_->Flush();
  EXPECT_EQ(sink->Take(), Values{});  // 2 is not durable yet; 1 is older than 2
  Commit();                           // epoch 2
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"k", {2}}}));
}

TEST_F(SubscriptionHubTest, UnsubscribedKeysAreForgotten) {
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"a", "b"}, {"p:"}));
  hub_->Flush();
  sink->Take();
  Set("a", 1);
  Set("b", 2);
  Set("p:1", 3);
  Commit();
  hub_->Unsubscribe(id, std::vector<std::string>{"a", "never"}, std::vector<std::string>{"p:"});
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"b", {2}}}));
  EXPECT_EQ(hub_->stats().subscriptions, 1u);
  hub_->UnsubscribeAll(id);
  Set("b", 5);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), Values{});
  EXPECT_EQ(hub_->stats().subscriptions, 0u);
  EXPECT_EQ(hub_->subscriber_count(), 1u);
  hub_->RemoveSubscriber(id);
  EXPECT_EQ(hub_->subscriber_count(), 0u);
}

TEST_F(SubscriptionHubTest, ASubscriberPastMaxPendingIsDroppedWithAReason) {
  SubscriptionOptions options;
  options.max_pending = 3;
  MakeHub(options);
  Set("f:9", 9);
  Commit();
  auto [slow, slow_sink] = Subscriber();
  auto [fine, fine_sink] = Subscriber();
  ASSERT_TRUE(Subscribe(slow, {}, {"f:"}));
  ASSERT_TRUE(Subscribe(fine, {"f:1"}));
  hub_->Flush();
  ASSERT_EQ(slow_sink->held(), 1u);  // not taken: the next updates wait in the hub
  EXPECT_EQ(fine_sink->Take(), (Values{{"f:1", {0}}}));
  for (int i = 0; i < 5; ++i) Set("f:" + std::to_string(i), 1);
  Commit();
  EXPECT_EQ(hub_->stats().disconnects, 1u);
  hub_->Flush();
  ASSERT_EQ(slow_sink->reasons().size(), 1u);
  EXPECT_NE(slow_sink->reasons()[0].find("more than 3"), std::string::npos);
  EXPECT_EQ(hub_->subscriber_count(), 1u);
  EXPECT_FALSE(Subscribe(slow, {"x"}));
  // The other subscriber is unharmed.
  EXPECT_EQ(fine_sink->Take(), (Values{{"f:1", {1}}}));
  hub_->RemoveSubscriber(slow);  // already gone: a no-op
  EXPECT_EQ(hub_->stats().pending_keys, 0u);
}

TEST_F(SubscriptionHubTest, HiddenKeysAreNeverDelivered) {
  SubscriptionOptions options;
  options.hidden = [](std::string_view key) { return key.starts_with('\0'); };
  MakeHub(options);
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {}, {""}));
  Set(std::string_view("\0id:1", 5), 1);
  Set("visible", 2);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"visible", {2}}}));
}

// Shows keys under "shop:" as "rows=<n> #<calls>": a value beyond its integer.
class CountingShower final : public ValueShower {
 public:
  bool ShowsMore(std::string_view key) const override { return key.starts_with("shop:"); }
  void Show(std::span<SubscriptionUpdate> updates) override {
    for (SubscriptionUpdate& update : updates) {
      if (!ShowsMore(update.key)) continue;
      ++calls;
      update.shown = ShownValue{fmt::format("rows={} #{}", update.value, calls), "{}"};
    }
  }
  int calls = 0;
};

TEST_F(SubscriptionHubTest, AKeyShownAsMoreIsSentWheneverWrittenWithItsShownValue) {
  SubscriptionOptions options;
  auto shower = std::make_shared<CountingShower>();
  options.shower = shower;
  MakeHub(options);
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"shop:4", "plain"}));
  Set("shop:4", 1);
  Set("plain", 1);
  Commit();
  hub_->Flush();
  auto shown = [](const std::vector<SubscriptionUpdate>& updates) {
    std::map<std::string, std::string> out;
    for (const SubscriptionUpdate& update : updates) {
      out[update.key] = update.shown ? update.shown->text : std::to_string(update.value);
    }
    return out;
  };
  EXPECT_EQ(shown(sink->TakeUpdates()),
            (std::map<std::string, std::string>{{"shop:4", "rows=1 #1"}, {"plain", "1"}}));
  // Written again with the same integer: the shown key goes out again, the plain one not.
  Set("shop:4", 1);
  Set("plain", 1);
  Commit();
  hub_->Flush();
  EXPECT_EQ(shown(sink->TakeUpdates()),
            (std::map<std::string, std::string>{{"shop:4", "rows=1 #2"}}));
  // Gone: 0 goes out once it is written, shown too.
  Delete("shop:4");
  Commit();
  hub_->Flush();
  EXPECT_EQ(shown(sink->TakeUpdates()),
            (std::map<std::string, std::string>{{"shop:4", "rows=0 #3"}}));
}

TEST_F(SubscriptionHubTest, NobodySubscribedStillTracksTheDurableEpoch) {
  Set("k", 3);
  Commit();  // no subscriber: the fast path
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"k"}));
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"k", {3}}}));
}

TEST_F(SubscriptionHubTest, ASubscribePastMaxSubscriptionsIsRefusedWhole) {
  SubscriptionOptions options;
  options.max_subscriptions = 3;
  MakeHub(options);
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"a", "b"}));
  // Already followed ones, and repeats within a call, count once.
  ASSERT_TRUE(Subscribe(id, {"a", "b", "a"}, {"p:", "p:"}));
  EXPECT_EQ(hub_->stats().subscriptions, 3u);
  const Status refused = Subscribe(id, {"c"}, {"q:"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("subscriber-max-subscriptions"), std::string::npos);
  // Nothing of the refused call is followed; the subscriber goes on.
  EXPECT_EQ(hub_->stats().subscriptions, 3u);
  hub_->Flush();
  sink->Take();
  Set("c", 1);
  Set("q:1", 2);
  Set("a", 3);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"a", {3}}}));
  EXPECT_TRUE(sink->reasons().empty());
}

TEST_F(SubscriptionHubTest, ASubscriberFollowingMoreThanMaxPendingLiveKeysIsDropped) {
  SubscriptionOptions options;
  options.max_pending = 4;
  MakeHub(options);
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {}, {"f:"}));
  // Never more than 4 pending at once, but the keys with a value sent add up.
  for (int i = 0; i < 5; ++i) {
    Set("f:" + std::to_string(i), 1);
    Commit();
    hub_->Flush();
    sink->Take();
  }
  ASSERT_EQ(sink->reasons().size(), 1u);
  EXPECT_NE(sink->reasons()[0].find("following more than 4 counters that have a value"),
            std::string::npos);
  EXPECT_EQ(hub_->stats().disconnects, 1u);
  EXPECT_EQ(hub_->subscriber_count(), 0u);
  EXPECT_EQ(hub_->stats().pending_keys, 0u);
  // Keys that went back to 0 are not held: the same subscriber stays within the limit.
  auto [other, other_sink] = Subscriber();
  ASSERT_TRUE(Subscribe(other, {}, {"g:"}));
  for (int i = 0; i < 10; ++i) {
    Set("g:" + std::to_string(i), 1);
    Commit();
    Delete("g:" + std::to_string(i));
    Commit();
    hub_->Flush();
    other_sink->Take();
  }
  EXPECT_TRUE(other_sink->reasons().empty());
}

TEST_F(SubscriptionHubTest, APrefixScanVisitsAtMostSnapshotMaxScanEntries) {
  SubscriptionOptions options;
  options.snapshot_max_keys = 100'000;
  options.snapshot_max_scan = 1024;
  MakeHub(options);
  for (int i = 0; i < 10'000; ++i) Set("f:" + std::to_string(i), 1);
  Commit();
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"x"}, {"f:", "rare:"}));
  hub_->Flush();
  const Values first = sink->Take();
  // The exact key, and the family's keys the budget reached.
  EXPECT_EQ(first.at("x"), std::vector<int64_t>{0});
  EXPECT_GT(first.size(), 1u);
  EXPECT_LE(first.size(), 1u + 1024u);
  // The others arrive when they change.
  Set("rare:1", 5);
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"rare:1", {5}}}));
}

TEST_F(SubscriptionHubTest, AnUnchangedCurrentValueIsOnlyForTheSubscriptionsThatAskedForIt) {
  Set("p:1", 5);
  Set("p:2", 6);
  Commit();
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"p:1"}));
  hub_->Flush();
  std::vector<SubscriptionUpdate> updates = sink->TakeUpdates();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_FALSE(updates[0].only_for);  // never sent before: new to every subscription

  ASSERT_TRUE(Subscribe(id, {}, {"p:"}));
  hub_->Flush();
  updates = sink->TakeUpdates();
  ASSERT_EQ(updates.size(), 2u);
  std::ranges::sort(updates, {}, &SubscriptionUpdate::key);
  // p:1 was sent already (for the exact key): again only for the prefix that asked.
  EXPECT_EQ(updates[0].key, "p:1");
  ASSERT_TRUE(updates[0].only_for);
  EXPECT_FALSE(updates[0].only_for->key);
  EXPECT_EQ(updates[0].only_for->prefixes, std::vector<std::string>{"p:"});
  EXPECT_EQ(updates[1].key, "p:2");
  EXPECT_FALSE(updates[1].only_for);

  // A value that changed meanwhile is new to every subscription.
  ASSERT_TRUE(Subscribe(id, {"p:2"}));
  Set("p:2", 7);
  Commit();
  hub_->Flush();
  updates = sink->TakeUpdates();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].value, 7);
  EXPECT_FALSE(updates[0].only_for);
}

TEST_F(SubscriptionHubTest, UnsubscribingAPrefixForgetsOnlyTheKeysNoLongerFollowed) {
  Set("p:10", 1);
  Set("p:2", 2);
  Set("p:3", 3);
  Set("q", 4);
  Commit();
  auto [id, sink] = Subscriber();
  ASSERT_TRUE(Subscribe(id, {"p:2", "q"}, {"p:", "p:1"}));
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"p:10", {1}}, {"p:2", {2}}, {"p:3", {3}}, {"q", {4}}}));
  Set("p:3", 30);  // pending when the prefix goes
  Commit();
  hub_->Unsubscribe(id, {}, std::vector<std::string>{"p:"});
  EXPECT_EQ(hub_->stats().pending_keys, 0u);
  hub_->Flush();
  EXPECT_EQ(sink->Take(), Values{});
  // FLUSHALL zeroes what is still followed (by the exact key, the longer prefix) only.
  keyspace_.LockAll().FlushAll();
  Commit();
  hub_->Flush();
  EXPECT_EQ(sink->Take(), (Values{{"p:10", {0}}, {"p:2", {0}}, {"q", {0}}}));
}

// A store that accepts every commit, for a hub fed by a real committer.
class NullPersistence final : public Persistence {
 public:
  Status Commit(const CommitBatch&, bool) override { return OkStatus(); }
  Status Sync() override { return OkStatus(); }
  Status Load(LoadVisitor&) override { return OkStatus(); }
  Result<uint64_t> BeginCheckpoint() override { return 1; }
  Status CheckpointWrite(const CommitBatch&) override { return OkStatus(); }
  Status FinishCheckpoint(uint64_t) override { return OkStatus(); }
  Status WriteCatalog(std::span<const CatalogOp>) override { return OkStatus(); }
  Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog() override {
    return std::vector<std::pair<std::string, std::string>>{};
  }
};

// A hub fed by a real engine's committer.
class SubscriptionHubEngineTest : public ::testing::Test {
 protected:
  void StartHub(int interval_ms) {
    ASSERT_TRUE(engine_.Start());
    SubscriptionOptions options;
    options.interval_ms = interval_ms;
    hub_ = std::make_unique<SubscriptionHub>(&engine_.keyspace(), options);
    hub_->Attach(engine_.committer());
    hub_->Start();
  }
  void TearDown() override {
    if (hub_) hub_->Stop();
    engine_.Stop();
  }
  // One increment, returned once durable.
  void IncrementDurably(const HashedKey& key) {
    uint64_t epoch;
    {
      View view = engine_.keyspace().Lock(key);
      ASSERT_TRUE(view.IncrBy(key, 1));
      epoch = view.required_epoch();
    }
    engine_.committer().WaitDurable(epoch);
  }
  // The last value `sink` received for `key` once it is `expected` (bounded wait for the
  // flusher), or the last one seen.
  static int64_t LastValue(RecordingSink& sink, const std::string& key, int64_t expected) {
    int64_t last = -1;
    for (int tries = 0; tries < 2000 && last != expected; ++tries) {
      const Values values = sink.Take();
      if (auto it = values.find(key); it != values.end()) last = it->second.back();
      if (last != expected) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return last;
  }

  NullPersistence persistence_;
  Engine engine_{&persistence_, EngineOptions{}};
  std::unique_ptr<SubscriptionHub> hub_;
};

TEST_F(SubscriptionHubEngineTest, WritersOnManyThreadsEndAtTheFinalValue) {
  StartHub(5);
  SubscriptionHub& hub = *hub_;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<SubscriberId> ids;
  for (int i = 0; i < 8; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ids.push_back(hub.AddSubscriber(sinks.back()));
    const std::vector<std::string> keys = {"hot"};
    const std::vector<std::string> prefixes = {i % 2 == 0 ? "h" : ""};
    ASSERT_TRUE(hub.Subscribe(ids.back(), keys, prefixes));
  }
  constexpr int kThreads = 4;
  constexpr int kIncrements = 2000;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&] {
      const HashedKey key("hot");
      for (int i = 0; i < kIncrements; ++i) IncrementDurably(key);
    });
  }
  for (auto& writer : writers) writer.join();
  for (auto& sink : sinks)
    EXPECT_EQ(LastValue(*sink, "hot", kThreads * kIncrements), kThreads * kIncrements);
}

// Subscribers come and go, subscribe and unsubscribe, on several threads while writers
// commit and the flusher runs (for TSan); every subscriber left ends at the final value.
TEST_F(SubscriptionHubEngineTest, SubscribersComingAndGoingWhileWritersCommit) {
  StartHub(2);
  SubscriptionHub& hub = *hub_;
  std::atomic<bool> writing{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::string> keys = {"k:" + std::to_string(t), "k:hot"};
      std::vector<std::string> prefixes = {"k:", "k:h"};
      for (int round = 0; writing.load(); ++round) {
        auto sink = std::make_shared<RecordingSink>();
        const SubscriberId id = hub.AddSubscriber(sink);
        EXPECT_TRUE(hub.Subscribe(id, keys, prefixes));
        hub.Unsubscribe(id, std::span(keys).first(1), std::span(prefixes).first(1));
        sink->Take();
        if (round % 2 == 0) hub.UnsubscribeAll(id);
        hub.RemoveSubscriber(id);
      }
    });
  }
  auto sink = std::make_shared<RecordingSink>();
  const SubscriberId id = hub.AddSubscriber(sink);
  ASSERT_TRUE(hub.Subscribe(id, std::vector<std::string>{}, std::vector<std::string>{"k:"}));
  constexpr int kIncrements = 3000;
  const HashedKey key("k:hot");
  for (int i = 0; i < kIncrements; ++i) {
    IncrementDurably(key);
    if (i % 100 == 0) sink->Take();
  }
  writing = false;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(LastValue(*sink, "k:hot", kIncrements), kIncrements);
  EXPECT_EQ(hub.subscriber_count(), 1u);
}

}  // namespace
}  // namespace tally::engine
