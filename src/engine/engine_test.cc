// Tests of the Engine's start and stop: loading the store then its log, restarts reading back
// what was written, and acknowledged increments being in the store.
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

#include "engine/engine_test_support.h"

namespace tally::engine {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

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

}  // namespace
}  // namespace tally::engine
