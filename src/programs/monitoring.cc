#include "programs/monitoring.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "core/process_stats.h"

namespace tally::programs {

using metrics::SampleWriter;
using metrics::Type;

void RegisterProcessMetrics(metrics::Registry& registry) {
  registry.AddGauge("tally_resident_memory_bytes", "Resident memory (RSS) of tallyd.",
                    [] { return static_cast<double>(ResidentBytes()); });
  const double started =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  registry.AddGauge("tally_start_time_seconds", "When tallyd started, in Unix seconds.",
                    [started] { return started; });
}

void RegisterDerivedMetrics(derived::DerivedCounters& derived, metrics::Registry& registry) {
  registry.AddCollector(
      "tally_changes_total",
      "Changes applied to derived counters, by origin: pushed (HTTP, COUNTER.PUSH) or from "
      "the PostgreSQL source's stream (rows of backfills included).",
      Type::kCounter, [&derived](SampleWriter& out) {
        out.Add({{"origin", "push"}}, derived.pushed_changes_applied());
        out.Add({{"origin", "source"}}, derived.source_changes_applied());
      });
  registry.AddCollector(
      "tally_derived_keys_written_total",
      "Derived counter groups written by applied changes (one per group a change moved).",
      Type::kCounter, [&derived](SampleWriter& out) { out.Add(derived.keys_written()); });
  registry.AddCollector("tally_derived_pushes_refused_total",
                        "Pushes refused whole (bad input, unknown counter, overflow).",
                        Type::kCounter,
                        [&derived](SampleWriter& out) { out.Add(derived.pushes_refused()); });
}

void RegisterSourceMetrics(SourceStatsReader read, std::string slot, metrics::Registry& registry) {
  using Stats = postgres::PostgresSource::Stats;
  // One reader shared by the collectors (each Render() calls it once per family).
  auto shared = std::make_shared<SourceStatsReader>(std::move(read));
  registry.AddCollector("tally_source_consumer",
                        "1 on the node that consumes the source (on one node: always), else 0.",
                        Type::kGauge, [shared, slot](SampleWriter& out) {
                          out.Add({{"slot", slot}}, (*shared)().has_value() ? 1.0 : 0.0);
                        });
  const auto add = [&](std::string_view name, std::string_view help, Type type,
                       std::function<double(const Stats&)> figure) {
    registry.AddCollector(name, help, type,
                          [shared, slot, figure = std::move(figure)](SampleWriter& out) {
                            if (const std::optional<Stats> stats = (*shared)()) {
                              out.Add({{"slot", slot}}, figure(*stats));
                            }
                          });
  };
  add("tally_source_streaming", "1 while the source streams changes (caught up or not), else 0.",
      Type::kGauge, [](const Stats& s) { return s.state == "streaming" ? 1.0 : 0.0; });
  add("tally_source_connected", "1 while the source is connected to PostgreSQL, else 0.",
      Type::kGauge, [](const Stats& s) { return s.connected ? 1.0 : 0.0; });
  add("tally_source_applied_lsn",
      "The source's position: the last LSN durable in tally and acknowledged, as a number.",
      Type::kGauge, [](const Stats& s) { return static_cast<double>(s.applied_lsn); });
  add("tally_source_received_lsn", "The start LSN of the last change received, as a number.",
      Type::kGauge, [](const Stats& s) { return static_cast<double>(s.received_lsn); });
  add("tally_source_lag_bytes", "Bytes of the server's WAL not yet applied by tally.", Type::kGauge,
      [](const Stats& s) { return static_cast<double>(s.lag_bytes); });
  add("tally_source_lag_seconds",
      "Age of the last applied transaction's commit while behind (0 when caught up).", Type::kGauge,
      [](const Stats& s) { return s.lag_seconds; });
  add("tally_source_transactions_total", "Source transactions applied.", Type::kCounter,
      [](const Stats& s) { return static_cast<double>(s.transactions); });
  add("tally_source_rows_total", "Row changes applied from the stream (backfills not included).",
      Type::kCounter, [](const Stats& s) { return static_cast<double>(s.rows); });
  add("tally_source_reconnects_total", "Reconnections to PostgreSQL.", Type::kCounter,
      [](const Stats& s) { return static_cast<double>(s.reconnects); });
}

void RegisterSubscriptionMetrics(const engine::SubscriptionHub& hub, metrics::Registry& registry) {
  registry.AddGauge("tally_subscribers",
                    "Live subscribers (Redis SUBSCRIBE/PSUBSCRIBE clients, HTTP event streams).",
                    [&hub] { return static_cast<double>(hub.subscriber_count()); });
}

Status SourceReadiness(const postgres::PostgresSource::Stats& s, int64_t max_lag_ms) {
  if (s.state == "streaming") {
    const auto lag_ms = static_cast<int64_t>(s.lag_seconds * 1000);
    if (lag_ms <= max_lag_ms) return OkStatus();
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("the source lags {:.3f} s behind PostgreSQL (over "
                                 "--ready-max-lag-ms {})",
                                 s.lag_seconds, max_lag_ms));
  }
  if (s.state == "held") {
    return MakeError(ErrorCode::kUnavailable,
                     "the source is held for a verification (tally verify): changes wait");
  }
  // The state only (starting, backfilling, reconnecting, failed), never s.error: /readyz
  // needs no password, and PostgreSQL's messages name hosts, users and databases. The
  // error is in the log and in the authenticated GET /v1/status.
  return MakeError(ErrorCode::kUnavailable,
                   fmt::format("the source is {} (details: the log, GET /v1/status)", s.state));
}

}  // namespace tally::programs
