// aggregates_bench: the cost of each aggregate kind against count(*). For each kind, one
// counter of that kind alone on an `orders` source in a fresh store: 200,000 random
// changes (inserts, updates moving rows between 1,000 groups, deletes) pushed in batches
// of 1,000, timed; then the memory the process gained per group kept (mallinfo2: the
// family index, the hidden records' mirror, the engine's keyspace and RocksDB's memtable
// together, the memtable's versions written meanwhile included; a group ends with about 5
// rows, so about 5 distinct values).
//
// The kinds run interleaved, round after round, so that a slower stretch of the machine
// falls on every kind alike; each line gives the median over the rounds and the spread
// (lowest-highest), and the ratio to count(*) of the same round.
//
//   aggregates_bench [changes] [rounds]     defaults: 200,000 changes, 5 rounds
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine/derived/derived_counters.h"
#include "storage/rocksdb_store.h"

namespace {

using namespace tally;  // NOLINT: a benchmark's main

constexpr int kGroups = 1000;
constexpr size_t kBatch = 1000;

struct Kind {
  const char* name;
  const char* aggregates;
};

constexpr Kind kKinds[] = {
    {"count(*)", "count(*)"},
    {"sum(int)", "sum(rating)"},
    {"sum(numeric)", "sum(total)"},
    {"count(DISTINCT)", "count(DISTINCT customer)"},
    {"max(int)", "max(rating)"},
    {"min(numeric)", "min(total)"},
    {"avg(numeric)", "avg(total)"},
    {"count,sum,max,avg", "count(*) AS n, sum(total) AS s, max(rating) AS m, avg(total) AS a"},
};

std::string Row(int64_t id, std::mt19937_64& rng) {
  return fmt::format(R"({{"id":{},"shop":{},"customer":{},"total":"{}.{:02}","rating":{}}})", id,
                     rng() % kGroups, rng() % 50'000, rng() % 10'000, rng() % 100, rng() % 100);
}

size_t HeapBytes() { return mallinfo2().uordblks; }

struct Measure {
  double changes_per_second = 0;
  double bytes_per_group = 0;
};

Measure Run(const Kind& kind, int changes) {
  const auto dir = std::filesystem::temp_directory_path() / "tally_aggregates_bench";
  std::filesystem::remove_all(dir);
  auto store = storage::RocksDbStore::Open({.path = dir.string()});
  if (!store) {
    fmt::print(stderr, "{}\n", store.error().message);
    std::exit(1);
  }
  ManualClock clock(1'700'000'000'000);
  engine::EngineOptions options;
  options.clock = &clock;
  engine::Engine engine(store->get(), options);
  if (!engine.Start()) std::exit(1);
  const size_t heap_before = HeapBytes();
  size_t groups = 0;
  double seconds = 0;
  Measure result;
  {
    derived::DerivedCounters counters(engine, **store, {});
    if (!counters.Load()) std::exit(1);
    auto defined = counters.Execute(fmt::format(
        "CREATE SOURCE orders (id bigint, shop bigint, customer bigint, total numeric(12,2), "
        "rating integer);"
        "CREATE COUNTER c AS SELECT shop, {} FROM orders GROUP BY shop",
        kind.aggregates));
    if (!defined) {
      fmt::print(stderr, "{}\n", defined.error().message);
      std::exit(1);
    }
    std::mt19937_64 rng(42);
    std::map<int64_t, std::string> rows;
    int64_t next_id = 1;
    auto decoder = std::make_unique<derived::ChangeDecoder>();
    std::string body;
    const auto start = std::chrono::steady_clock::now();
    for (int done = 0; done < changes;) {
      body = "[";
      for (size_t i = 0; i < kBatch && done < changes; ++i, ++done) {
        if (i > 0) body += ',';
        const uint64_t what = rows.size() < 5000 ? 0 : rng() % 3;
        if (what == 0) {
          std::string row = Row(next_id, rng);
          body += R"({"source":"orders","new":)" + row + "}";
          rows[next_id++] = std::move(row);
        } else {
          auto it = rows.lower_bound(static_cast<int64_t>(rng() % static_cast<uint64_t>(next_id)));
          if (it == rows.end()) it = rows.begin();
          if (what == 1) {
            std::string row = Row(it->first, rng);
            body += R"({"source":"orders","old":)" + it->second + R"(,"new":)" + row + "}";
            it->second = std::move(row);
          } else {
            body += R"({"source":"orders","old":)" + it->second + "}";
            rows.erase(it);
          }
        }
      }
      body += "]";
      auto pushed = counters.Push(body, "", *decoder);
      if (!pushed) {
        fmt::print(stderr, "{}\n", pushed.error().message);
        std::exit(1);
      }
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rows.clear();
    body = std::string();
    decoder.reset();
    const size_t heap_after = HeapBytes();  // before the listing below allocates its page
    auto prefix = counters.PrefixOf("c", {});
    auto page = counters.List("c", *prefix, "", 1'000'000);
    groups = page ? page->items.size() : 0;
    result.changes_per_second = changes / seconds;
    result.bytes_per_group =
        groups == 0 ? 0
                    : static_cast<double>(heap_after - heap_before) / static_cast<double>(groups);
  }
  engine.Stop();
  std::filesystem::remove_all(dir);
  return result;
}

// The median of `values` (the mean of the middle two for an even count). REQUIRES: not empty.
double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int changes = argc > 1 ? std::atoi(argv[1]) : 200'000;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  fmt::print("{} changes per kind and round, {} rounds interleaved, {} groups, batches of {}\n",
             changes, rounds, kGroups, kBatch);
  constexpr size_t kCount = std::size(kKinds);
  std::vector<std::vector<double>> rates(kCount), ratios(kCount), bytes(kCount);
  for (int round = 0; round < rounds; ++round) {
    double base = 0;
    for (size_t k = 0; k < kCount; ++k) {
      const Measure result = Run(kKinds[k], changes);
      if (k == 0) base = result.changes_per_second;
      rates[k].push_back(result.changes_per_second);
      ratios[k].push_back(result.changes_per_second / base);
      bytes[k].push_back(result.bytes_per_group);
    }
  }
  fmt::print("{:<20} {:>12} {:>19} {:>10} {:>12}\n", "kind", "changes/s", "(lowest-highest)",
             "x count(*)", "bytes/group");
  for (size_t k = 0; k < kCount; ++k) {
    const auto [low, high] = std::minmax_element(rates[k].begin(), rates[k].end());
    fmt::print("{:<20} {:>12.0f} {:>19} {:>10.2f} {:>12.0f}\n", kKinds[k].name, Median(rates[k]),
               fmt::format("({:.0f}-{:.0f})", *low, *high), Median(ratios[k]), Median(bytes[k]));
  }
  return 0;
}
