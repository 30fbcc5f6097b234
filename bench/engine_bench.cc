// Micro-benchmarks of the engine's increment path, without network or storage.
//
// The question they answer: how many increments a second can one counter take from several
// threads, compared with the floor every sharded-counter design must beat, a single
// std::atomic<int64_t> that all threads fetch_add (one cache line bouncing between cores).
// Each engine thread plays a worker: its own IncrementBuffer, a turn of Add() calls, then
// Publish() folds them into the shared keyspace. Rows report items/s, one item being one
// increment, summed over the threads (wall-clock time).
//
//   build/bin/engine_bench                        all rows
//   build/bin/engine_bench --benchmark_filter=Hot  one family
#include <benchmark/benchmark.h>

#include <atomic>
#include <charconv>
#include <cstdint>
#include <string_view>

#include "core/clock.h"
#include "engine/increment_buffer.h"
#include "engine/keyspace.h"

namespace tally::engine {
namespace {

constexpr int kTurn = 64;                  // increments a worker folds per Publish
constexpr size_t kRandomKeys = 1'000'000;  // the keyspace of the random-key rows

// One keyspace per family, shared by the family's threads and kept across its runs.
Keyspace& HotKeyspace() {
  static Keyspace keyspace(SystemClock::Default());
  return keyspace;
}

// Spells random key number `n` into `buffer`, as a request would carry it ("bench:r:123").
// Formatting and hashing each key, as the server does, keeps the rows from measuring the
// cache misses of a 1M-entry table of prepared keys instead of the engine's own.
class KeySpeller {
 public:
  HashedKey Spell(size_t n) {
    char* end = std::to_chars(buffer_ + kPrefix.size(), buffer_ + sizeof buffer_, n).ptr;
    return HashedKey(std::string_view(buffer_, static_cast<size_t>(end - buffer_)));
  }

 private:
  static constexpr std::string_view kPrefix = "bench:r:";
  char buffer_[32] = "bench:r:";
};

// 1M counters, all present before the first timed increment, so that the rows measure
// increments of existing counters rather than inserts.
Keyspace& RandomKeyspace() {
  static Keyspace* keyspace = [] {
    auto* k = new Keyspace(SystemClock::Default());
    IncrementBuffer buffer(k);
    KeySpeller speller;
    for (size_t i = 0; i < kRandomKeys; ++i) {
      buffer.Add(speller.Spell(i), 0);
      if (buffer.size() == 4096) {
        buffer.Publish();
        buffer.Clear();
      }
    }
    buffer.Publish();
    return k;
  }();
  return *keyspace;
}

// A small fast generator, one per thread; std::mt19937 would dominate the random rows.
class XorShift {
 public:
  explicit XorShift(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  // Uniform in [0, n) without a division.
  size_t Below(size_t n) { return static_cast<size_t>((Next() >> 32) * n >> 32); }

 private:
  uint64_t state_;
};

// ---- The floor ---------------------------------------------------------------------------

alignas(64) std::atomic<int64_t> shared_atomic{0};

void BM_HotAtomicFetchAdd(benchmark::State& state) {
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): benchmark idiom
    for (int i = 0; i < kTurn; ++i) shared_atomic.fetch_add(1);
  }
  state.SetItemsProcessed(state.iterations() * kTurn);
}
BENCHMARK(BM_HotAtomicFetchAdd)->ThreadRange(1, 4)->UseRealTime();

// ---- One hot counter through the engine ----------------------------------------------------

// A worker's turn: 64 increments of the one counter, then one fold.
void BM_HotKeyTurnOf64(benchmark::State& state) {
  const HashedKey key("bench:hot");
  IncrementBuffer buffer(&HotKeyspace());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): benchmark idiom
    for (int i = 0; i < kTurn; ++i) buffer.Add(key, 1);
    benchmark::DoNotOptimize(buffer.Publish());
    buffer.Clear();
  }
  state.SetItemsProcessed(state.iterations() * kTurn);
}
BENCHMARK(BM_HotKeyTurnOf64)->ThreadRange(1, 4)->UseRealTime();

// The worst case for the buffer: a turn of one increment, so every increment takes the lock.
void BM_HotKeyPublishEach(benchmark::State& state) {
  const HashedKey key("bench:hot");
  IncrementBuffer buffer(&HotKeyspace());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): benchmark idiom
    buffer.Add(key, 1);
    benchmark::DoNotOptimize(buffer.Publish());
    buffer.Clear();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HotKeyPublishEach)->ThreadRange(1, 4)->UseRealTime();

// Without the buffer at all: a View and IncrBy per increment, as a single command does.
void BM_HotKeyViewIncrBy(benchmark::State& state) {
  const HashedKey key("bench:hot");
  Keyspace& keyspace = HotKeyspace();
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): benchmark idiom
    View view = keyspace.Lock(key);
    benchmark::DoNotOptimize(view.IncrBy(key, 1));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HotKeyViewIncrBy)->ThreadRange(1, 4)->UseRealTime();

// ---- Random keys over 1M counters ---------------------------------------------------------

void BM_RandomKeysTurnOf64(benchmark::State& state) {
  IncrementBuffer buffer(&RandomKeyspace());
  XorShift rng(static_cast<uint64_t>(state.thread_index()) + 1);
  KeySpeller speller;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): benchmark idiom
    for (int i = 0; i < kTurn; ++i) buffer.Add(speller.Spell(rng.Below(kRandomKeys)), 1);
    benchmark::DoNotOptimize(buffer.Publish());
    buffer.Clear();
  }
  state.SetItemsProcessed(state.iterations() * kTurn);
}
BENCHMARK(BM_RandomKeysTurnOf64)->ThreadRange(1, 4)->UseRealTime();

void BM_RandomKeysPublishEach(benchmark::State& state) {
  IncrementBuffer buffer(&RandomKeyspace());
  XorShift rng(static_cast<uint64_t>(state.thread_index()) + 1);
  KeySpeller speller;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): benchmark idiom
    buffer.Add(speller.Spell(rng.Below(kRandomKeys)), 1);
    benchmark::DoNotOptimize(buffer.Publish());
    buffer.Clear();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RandomKeysPublishEach)->ThreadRange(1, 4)->UseRealTime();

}  // namespace
}  // namespace tally::engine

BENCHMARK_MAIN();
