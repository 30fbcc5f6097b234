#include "engine/engine_metrics.h"

#include <string>

#include "engine/databases.h"

namespace tally::engine {

void RegisterEngineMetrics(Engine& engine, metrics::Registry& registry,
                           std::function<bool(std::string_view)> hide) {
  using metrics::SampleWriter;
  using metrics::Type;
  // Commits that wrote something; an epoch closed with nothing to write costs no I/O and
  // would only blur the latency.
  metrics::Histogram& batch_sizes = registry.AddHistogram(
      "tally_commit_batch_operations",
      "Counter writes and deletes per group commit (commits that wrote something).",
      metrics::ExponentialBuckets(1, 4, 11));
  metrics::Histogram& latency = registry.AddHistogram(
      "tally_commit_duration_seconds",
      "Time from the drain of one group commit to its announcement as durable (sync mode: "
      "written and fsync'd; commits that wrote something).",
      metrics::ExponentialBuckets(0.00005, 2, 16));
  engine.committer().AddCommitObserver(
      [&batch_sizes, &latency](const CommitBatch& batch, uint64_t commit_micros) {
        if (batch.empty()) return;
        batch_sizes.Observe(static_cast<double>(batch.put_count() + batch.delete_count()));
        latency.Observe(static_cast<double>(commit_micros) / 1e6);
      });

  const Committer& committer = engine.committer();
  const Keyspace& keyspace = engine.keyspace();
  const auto stat = [&committer](uint64_t CommitStats::*field) {
    return [&committer, field](SampleWriter& out) { out.Add(committer.stats().*field); };
  };
  registry.AddCollector("tally_commits_total", "Group commits, empty epochs included.",
                        Type::kCounter, stat(&CommitStats::commits));
  registry.AddCollector("tally_commit_failures_total",
                        "Failed attempts to write a group commit (each is retried).",
                        Type::kCounter, stat(&CommitStats::failures));
  registry.AddCollector("tally_commit_fsyncs_total",
                        "fdatasyncs of the commit log by the sync thread (sync mode); commits "
                        "written while one runs share the next.",
                        Type::kCounter, stat(&CommitStats::syncs));
  registry.AddGauge("tally_store_healthy", "1 while commits to the store succeed, else 0.",
                    [&committer] { return committer.stats().healthy ? 1.0 : 0.0; });
  registry.AddCollector("tally_checkpoints_total", "Checkpoints written.", Type::kCounter,
                        stat(&CommitStats::checkpoints));
  registry.AddCollector("tally_checkpoint_failures_total", "Checkpoints that failed.",
                        Type::kCounter, stat(&CommitStats::checkpoint_failures));
  registry.AddGauge(
      "tally_checkpoint_backlog_counters",
      "Counters changed since the last checkpoint (replayed from the log on restart).",
      [&keyspace] { return static_cast<double>(keyspace.checkpoint_backlog()); });
  registry.AddGauge(
      "tally_commit_log_bytes", "Bytes of commit log written since the last checkpoint began.",
      [&engine] { return static_cast<double>(engine.persistence_stats().log_bytes); });
  registry.AddGauge("tally_store_table_bytes", "Bytes of the store's tables.", [&engine] {
    return static_cast<double>(engine.persistence_stats().disk_bytes);
  });
  registry.AddGauge("tally_counters",
                    "Counters resident in memory (expired, not yet reclaimed, included).",
                    [&keyspace] { return static_cast<double>(keyspace.size()); });
  registry.AddGauge("tally_counters_expiring",
                    "Counters with an expiry deadline: the expiry backlog.",
                    [&keyspace] { return static_cast<double>(keyspace.expiring_count()); });
  registry.AddCollector("tally_expired_counters_total", "Expired counters reclaimed.",
                        Type::kCounter, stat(&CommitStats::reclaimed));
  registry.AddGauge("tally_counters_memory_bytes",
                    "Bytes of the in-memory counter maps and indexes.",
                    [&keyspace] { return static_cast<double>(keyspace.memory_bytes()); });
  registry.AddCollector(
      "tally_increments_total",
      "Increments applied to counters, from every origin (Redis, pushes, the source).",
      Type::kCounter, [&keyspace](SampleWriter& out) { out.Add(keyspace.increments_applied()); });
  registry.AddCollector(
      "tally_hot_key_writes_per_second",
      "The most-written counters over the last minute (sampled; see INFO hotkeys).", Type::kGauge,
      [&engine, hide = std::move(hide)](SampleWriter& out) {
        for (const HotKey& key : engine.hot_keys().Top(kHotKeyMetricSeries, hide)) {
          const DatabaseKey name = SplitStoredKey(key.key);
          if (name.db == 0) {
            out.Add({{"key", key.key}}, key.writes_per_second);
          } else {
            out.Add({{"db", std::to_string(name.db)}, {"key", std::string(name.name)}},
                    key.writes_per_second);
          }
        }
      });
  registry.AddCollector(
      "tally_database_counters",
      "Counters per database (SELECT) that holds any, tally's own records in database 0.",
      Type::kGauge, [&keyspace](SampleWriter& out) {
        for (uint32_t db = 0; db < kMaxDatabases; ++db) {
          const size_t counters = keyspace.database_size(db);
          if (counters > 0) out.Add({{"db", std::to_string(db)}}, static_cast<double>(counters));
        }
      });
}

}  // namespace tally::engine
