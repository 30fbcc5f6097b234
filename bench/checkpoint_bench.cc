// checkpoint_bench: what a checkpoint costs the tables (storage/table_format.h) — the CPU of
// writing the counters changed since the previous checkpoint, RocksDB's flush and the
// compactions they cause — a key written, with random keys as the random-key benchmarks
// leave them.
//
//   build/bin/checkpoint_bench [keyspace] [keys-a-checkpoint] [checkpoints] [dir]
//
// Defaults: 1,000,000 keys "counter:{tag}:<12 digits>" (redis-benchmark's -r 1000000),
// 470,000 written a checkpoint (what 10 s of the cluster's random -P 16 row changes on each
// node), 16 checkpoints, in a new directory under /tmp. Each checkpoint writes its keys in
// batches of 10,000 as the engine's checkpoint thread does, flushes, and waits for the
// compactions that follow, so that their CPU is counted too (the keys are made before the
// clock runs). CPU is the whole process's (user + system, RocksDB's threads included), from
// getrusage.
#include <fmt/format.h>
#include <rocksdb/db.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/commit_batch.h"
#include "storage/table_format.h"

namespace {

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

uint64_t Property(rocksdb::DB& db, const char* name) {
  uint64_t value = 0;
  db.GetIntProperty(name, &value);
  return value;
}

std::string LevelZeroFiles(rocksdb::DB& db) {
  std::string files;
  return db.GetProperty("rocksdb.num-files-at-level0", &files) ? files : "?";
}

// Waits (at most 10 minutes) until no flush or compaction runs or is due.
bool WaitForBackgroundWork(rocksdb::DB& db) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Property(db, "rocksdb.num-running-compactions") == 0 &&
        Property(db, "rocksdb.num-running-flushes") == 0 &&
        Property(db, "rocksdb.compaction-pending") == 0 &&
        Property(db, "rocksdb.mem-table-flush-pending") == 0) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string CounterKey(std::string_view key) {
  std::string stored(1, tally::storage::kCounterPrefix);
  stored.append(key);
  return stored;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t keyspace = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  const uint64_t per_checkpoint = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 470'000;
  const int checkpoints = argc > 3 ? std::atoi(argv[3]) : 16;
  const std::string dir =
      argc > 4 ? argv[4] : fmt::format("/tmp/checkpoint_bench.{}", static_cast<int>(getpid()));
  if (keyspace == 0 || per_checkpoint == 0 || checkpoints <= 0) {
    fmt::print(stderr,
               "usage: checkpoint_bench [keyspace] [keys-a-checkpoint] [checkpoints] [dir]\n");
    return 2;
  }
  std::filesystem::remove_all(dir);
  auto db = tally::storage::OpenTables({dir, tally::storage::kDefaultWriteBufferBytes, 4 << 20},
                                       tally::storage::TableLayout::kSingleNode);
  if (!db) {
    fmt::print(stderr, "{}\n", db.error().message);
    return 1;
  }
  std::mt19937_64 random(42);
  std::uniform_int_distribution<uint64_t> pick(0, keyspace - 1);
  rocksdb::FlushOptions flush;
  flush.wait = true;

  std::vector<tally::engine::CommitBatch> batches((per_checkpoint + 9'999) / 10'000);
  double cpu_writing = 0;
  double cpu_after = 0;
  for (int c = 0; c < checkpoints; ++c) {
    // The keys are made before the clock runs: only the tables' work is counted.
    for (uint64_t i = 0; i < per_checkpoint; ++i) {
      tally::engine::CommitBatch& batch = batches[i / 10'000];
      if (i % 10'000 == 0) batch.Clear();
      batch.AddPut(fmt::format("counter:{{tag}}:{:012}", pick(random)),
                   {static_cast<int64_t>(c * per_checkpoint + i), 0});
    }
    const double cpu_before = CpuSeconds();
    for (const tally::engine::CommitBatch& batch : batches) {
      if (auto status = tally::storage::WriteCheckpointBatch(**db, batch, &CounterKey); !status) {
        fmt::print(stderr, "{}\n", status.error().message);
        return 1;
      }
    }
    if (auto status = tally::storage::FromRocks((*db)->Flush(flush), "flush"); !status) {
      fmt::print(stderr, "{}\n", status.error().message);
      return 1;
    }
    const double cpu_flushed = CpuSeconds();
    if (!WaitForBackgroundWork(**db)) {
      fmt::print(stderr, "compactions still running after 10 minutes\n");
      return 1;
    }
    cpu_writing += cpu_flushed - cpu_before;
    cpu_after += CpuSeconds() - cpu_flushed;
    fmt::print("checkpoint {}: {:.0f} ms CPU writing and flushing, {:.0f} ms compacting after\n",
               c + 1, (cpu_flushed - cpu_before) * 1e3, (CpuSeconds() - cpu_flushed) * 1e3);
  }
  const double written = static_cast<double>(per_checkpoint) * checkpoints;
  fmt::print(
      "{} checkpoints of {} keys over {}: {:.2f} µs CPU a key written ({:.2f} writing and "
      "flushing, {:.2f} compacting after), L0 files at the end {}\n",
      checkpoints, per_checkpoint, keyspace, (cpu_writing + cpu_after) * 1e6 / written,
      cpu_writing * 1e6 / written, cpu_after * 1e6 / written, LevelZeroFiles(**db));
  db->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
