#include "engine/hot_keys.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/clock.h"
#include "engine/increment_buffer.h"
#include "engine/write_sketch.h"

namespace tally::engine {
namespace {

constexpr int64_t kStart = 1'700'000'000'000;

std::string Numbered(std::string prefix, int n) { return prefix.append(std::to_string(n)); }

void Write(Keyspace& keyspace, const std::string& key, int times) {
  const HashedKey hashed(key);
  for (int i = 0; i < times; ++i) {
    View view = keyspace.Lock(hashed);
    ASSERT_TRUE(view.IncrBy(hashed, 1).has_value());
  }
}

TEST(WriteSketch, HoldsTheHeavyKeyAmongManyAndNeverOvercounts) {
  WriteSketch sketch;
  // 1000 writes of "hot" spread among 5000 writes of 500 other keys.
  for (int i = 0; i < 5000; ++i) {
    sketch.Add(HashedKey(Numbered("k", i % 500)), 1);
    if (i % 5 == 0) sketch.Add(HashedKey("hot"), 1);
  }
  std::vector<KeyWrites> drained;
  sketch.Drain(&drained);
  ASSERT_FALSE(drained.empty());
  uint64_t hot = 0;
  for (const KeyWrites& key : drained) {
    if (key.key == "hot") {
      hot = key.writes;
    } else {
      EXPECT_LE(key.writes, 10u) << key.key;  // each other key has 10 writes
    }
  }
  EXPECT_GT(hot, 0u);
  EXPECT_LE(hot, 1000u);
  // Drained: empty until the next write.
  drained.clear();
  sketch.Drain(&drained);
  EXPECT_TRUE(drained.empty());
}

TEST(WriteSketch, CountsWeightsExactlyWhileKeysFit) {
  WriteSketch sketch;
  sketch.Add(HashedKey("a"), 5);
  sketch.Add(HashedKey("b"), 1);
  sketch.Add(HashedKey("a"), 64);
  std::vector<KeyWrites> drained;
  sketch.Drain(&drained);
  ASSERT_EQ(drained.size(), 2u);
  EXPECT_EQ(drained[0].key, "a");
  EXPECT_EQ(drained[0].writes, 69u);
  EXPECT_EQ(drained[1].key, "b");
  EXPECT_EQ(drained[1].writes, 1u);
}

TEST(HotKeys, AKeyWrittenTenTimesAsOftenComesFirst) {
  ManualClock clock(kStart);
  Keyspace keyspace(&clock);
  HotKeys hot_keys(&keyspace);
  for (int round = 0; round < 10; ++round) {
    Write(keyspace, "hot", 1000);
    for (int k = 0; k < 20; ++k) Write(keyspace, Numbered("cold:", k), 100);
    clock.Advance(1000);
    hot_keys.Tick();
  }
  const std::vector<HotKey> top = hot_keys.Top(5);
  ASSERT_FALSE(top.empty());
  EXPECT_EQ(top[0].key, "hot");
  // Sampling moves at most a sample's weight between keys of one stripe per tick.
  EXPECT_GE(top[0].writes, 10u * (1000 - 2 * kWriteSampleEvery));
  EXPECT_LE(top[0].writes, 10u * (1000 + 2 * kWriteSampleEvery));
  // 10 s since the start: the rate is over 10 s.
  EXPECT_DOUBLE_EQ(top[0].writes_per_second, static_cast<double>(top[0].writes) / 10.0);
  for (size_t i = 1; i < top.size(); ++i) EXPECT_LT(top[i].writes, top[0].writes / 5);
}

// The counts below are multiples of kWriteSampleEvery, so that sampling leaves nothing
// unsampled and the figures are exact.
static_assert(32 % kWriteSampleEvery == 0 && 416 % kWriteSampleEvery == 0 &&
              800 % kWriteSampleEvery == 0 && 96 % kWriteSampleEvery == 0);

TEST(HotKeys, OldWindowsFallOutAfterAMinute) {
  ManualClock clock(kStart);
  Keyspace keyspace(&clock);
  HotKeys hot_keys(&keyspace);
  Write(keyspace, "early", 800);
  hot_keys.Tick();
  clock.Advance(30'000);
  Write(keyspace, "late", 416);
  hot_keys.Tick();
  std::vector<HotKey> top = hot_keys.Top(10);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].key, "early");
  EXPECT_EQ(top[0].writes, 800u);
  EXPECT_EQ(top[1].key, "late");
  EXPECT_EQ(top[1].writes, 416u);
  EXPECT_DOUBLE_EQ(top[0].writes_per_second, 800.0 / 30.0);

  // 60 s after the first window it is out, whether or not a tick came since.
  clock.Advance(30'000);
  top = hot_keys.Top(10);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].key, "late");
  EXPECT_DOUBLE_EQ(top[0].writes_per_second, 416.0 / 60.0);
  hot_keys.Tick();
  clock.Advance(30'000);
  EXPECT_TRUE(hot_keys.Top(10).empty());
}

TEST(HotKeys, CountsEachIncrementOfABufferFoldAndHidesWhatItIsTold) {
  ManualClock clock(kStart);
  Keyspace keyspace(&clock);
  HotKeys hot_keys(&keyspace);
  IncrementBuffer buffer(&keyspace);
  for (int i = 0; i < 64; ++i) buffer.Add(HashedKey("folded"), 1);
  buffer.Publish();
  buffer.Clear();
  Write(keyspace, std::string("\0pos:posts", 10), 32);
  hot_keys.Tick();
  std::vector<HotKey> top = hot_keys.Top(10);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].key, "folded");
  EXPECT_EQ(top[0].writes, 64u);
  top = hot_keys.Top(10, [](std::string_view key) { return key.starts_with('\0'); });
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].key, "folded");
  EXPECT_EQ(hot_keys.Top(0).size(), 0u);
}

TEST(HotKeys, RatesCountFromTheStartNotFromConstruction) {
  ManualClock clock(kStart);
  Keyspace keyspace(&clock);
  HotKeys hot_keys(&keyspace);
  // Made, then two minutes go by (the Engine loads the store), with a write before the
  // start: it is not measured.
  Write(keyspace, "before", 800);
  clock.Advance(120'000);
  hot_keys.Start();
  Write(keyspace, "hot", 800);
  clock.Advance(10'000);
  hot_keys.Tick();
  const std::vector<HotKey> top = hot_keys.Top(10);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].key, "hot");
  EXPECT_EQ(top[0].writes, 800u);
  // 10 s since the start, not 130 s (which the window would have clamped to 60 s).
  EXPECT_DOUBLE_EQ(top[0].writes_per_second, 800.0 / 10.0);
  hot_keys.Stop();
}

TEST(HotKeys, TheThreadTicks) {
  Keyspace keyspace(SystemClock::Default());
  HotKeys hot_keys(&keyspace);
  hot_keys.Start();
  Write(keyspace, "ticked", 96);
  // Bounded: the thread ticks once a second.
  for (int i = 0; i < 100 && hot_keys.Top(1).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  hot_keys.Stop();
  const std::vector<HotKey> top = hot_keys.Top(1);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].key, "ticked");
  EXPECT_EQ(top[0].writes, 96u);
}

}  // namespace
}  // namespace tally::engine
