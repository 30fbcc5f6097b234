// Writers, readers and a drainer hammering one keyspace at once, checked against a model of
// the store the drained batches build. Run them under TSan too (with
// TSAN_OPTIONS=detect_deadlocks=0: Drain holds all 128 stripe locks, more than TSan's
// deadlock detector can track).
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
