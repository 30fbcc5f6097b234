// tallyd: the tally server. Opens the embedded store, loads the counters, serves the Redis
// protocol until SIGINT or SIGTERM, then commits and fsyncs everything before exiting.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/metrics.h"
#include "engine/derived/derived_counters.h"
#include "engine/engine.h"
#include "engine/engine_metrics.h"
#include "engine/subscriptions.h"
#include "programs/monitoring.h"
#include "servers/http/server.h"
#include "servers/redis/server.h"
#include "sources/postgres/postgres_source.h"
#include "storage/rocksdb_store.h"

namespace {

int64_t ParseBytes(const std::string& text) {
  // "64mb", "1gb", "512k", "1048576": Redis's spelling of sizes.
  size_t end = 0;
  const int64_t number = std::stoll(text, &end);
  std::string unit = text.substr(end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "b") return number;
  if (unit == "k" || unit == "kb") return number * 1024;
  if (unit == "m" || unit == "mb") return number * 1024 * 1024;
  if (unit == "g" || unit == "gb") return number * 1024LL * 1024 * 1024;
  throw CLI::ValidationError("size", "unknown unit '" + unit + "' (use b, kb, mb or gb)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tallyd: exact, durable counters over the Redis protocol, on an embedded RocksDB "
      "store"};
  app.set_config("--config", "", "Read options from this file (lines of 'name = value')");
  app.get_formatter()->column_width(44);

  tally::redis::ServerOptions server;
  std::string data_dir = "./data";
  std::string durability = "sync";
  int sync_interval_ms = 100;
  int checkpoint_interval_ms = 10000;
  std::string group_commit = "inline";
  std::string log_level = "info";
  std::string proto_max_bulk_len = "512mb";
  std::string query_buffer_limit = "1gb";
  std::string output_buffer_limit = "256mb";
  std::string definitions_file;
  tally::http::HttpOptions http;
  http.bind.clear();  // empty: the same address as --bind
  std::string http_max_body = "64mb";
  int64_t idempotency_window_seconds = 24 * 3600;
  tally::postgres::PostgresSourceOptions pg_source;
  std::string source_lag_warn_bytes = "1gb";
  int64_t ready_max_lag_ms = 10000;
  bool public_metrics = false;
  tally::engine::SubscriptionOptions subscription_options;
  std::string subscriber_max_queued_bytes = "8mb";

  app.add_option("--bind", server.bind, "Address to listen on")->capture_default_str();
  app.add_option("--port", server.port, "Port for the Redis protocol (0 = any free port)")
      ->capture_default_str();
  app.add_option("--data-dir", data_dir, "Directory of the embedded RocksDB store")
      ->capture_default_str();
  app.add_option("--durability", durability,
                 "sync: acknowledge an increment once it is fsync'd (group commit); "
                 "async: acknowledge at once, fsync every --sync-interval-ms")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  app.add_option("--sync-interval-ms", sync_interval_ms,
                 "In async mode, how often the write-ahead log is fsync'd")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  app.add_option("--checkpoint-interval-ms", checkpoint_interval_ms,
                 "How often counters changed since the last checkpoint are written to the "
                 "store's tables (the commit log is replayed only from there on restart)")
      ->check(CLI::Range(10, 3600000))
      ->capture_default_str();
  app.add_option("--group-commit", group_commit,
                 "Sync mode: 'inline' = the I/O thread that waits for a commit writes and "
                 "fsyncs it itself; 'thread' = a committer thread does, while I/O goes on")
      ->check(CLI::IsMember({"inline", "thread"}))
      ->capture_default_str();
  app.add_option("--workers", server.workers,
                 "I/O worker threads (0 = one per CPU this process may use)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  app.add_option("--requirepass", server.requirepass,
                 "Password clients must give with AUTH (or HELLO ... AUTH) before any command");
  app.add_option("--maxclients", server.maxclients, "Most simultaneous client connections")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--timeout", server.timeout_seconds,
                 "Close clients idle this many seconds (0 = never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--proto-max-bulk-len", proto_max_bulk_len,
                 "Largest bulk string a request may carry (e.g. 512mb)")
      ->capture_default_str();
  app.add_option("--max-multibulk-length", server.max_multibulk_length,
                 "Most arguments in one request")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31))
      ->capture_default_str();
  app.add_option("--client-query-buffer-limit", query_buffer_limit,
                 "Unprocessed input one client may accumulate before it is closed")
      ->capture_default_str();
  app.add_option("--client-output-buffer-limit", output_buffer_limit,
                 "Unsent replies one client may accumulate before it is closed (a client that "
                 "does not read its replies)")
      ->capture_default_str();
  app.add_option("--definitions", definitions_file,
                 "A SQL script of CREATE SOURCE / CREATE COUNTER statements applied at start "
                 "(statements already in effect are no-ops)")
      ->check(CLI::ExistingFile);
  app.add_option("--idempotency-window", idempotency_window_seconds,
                 "Seconds a pushed change's or batch's id is remembered (resends within it are "
                 "not counted again)")
      ->check(CLI::Range(int64_t{1}, int64_t{366} * 24 * 3600))
      ->capture_default_str();
  app.add_option("--http-port", http.port, "Port for the HTTP API (0 = any free port)")
      ->capture_default_str();
  app.add_option("--http-bind", http.bind,
                 "Address the HTTP API listens on (default: the --bind address)");
  app.add_option("--http-threads", http.threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--http-max-body", http_max_body,
                 "Largest HTTP request body (e.g. 64mb); a larger one gets 413")
      ->capture_default_str();
  app.add_option("--http-max-connections", http.max_connections,
                 "Most simultaneous HTTP connections; more get 503")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--http-timeout", http.idle_timeout_seconds,
                 "Close an HTTP connection whose next request has not arrived whole, or whose "
                 "response could not be sent, within this many seconds (0 = never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31))
      ->capture_default_str();
  app.add_option("--source", pg_source.conninfo,
                 "PostgreSQL to follow (libpq connection string, postgresql://user:pw@host/db "
                 "or key=value): the tables named like the sources that counters read are "
                 "backfilled, then kept by logical replication");
  app.add_option("--source-slot", pg_source.slot,
                 "Logical replication slot tally creates and consumes on the --source database")
      ->capture_default_str();
  app.add_option("--source-publication", pg_source.publication,
                 "Publication tally creates (or extends) for the source tables")
      ->capture_default_str();
  app.add_option("--source-lag-warn-bytes", source_lag_warn_bytes,
                 "Warn when the stream is this far behind the database's WAL (e.g. 1gb)")
      ->capture_default_str();
  app.add_option("--ready-max-lag-ms", ready_max_lag_ms,
                 "GET /readyz answers 503 while the --source is not streaming or lags more than "
                 "this many ms behind PostgreSQL")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_flag("--public-metrics", public_metrics,
               "Serve GET /metrics without the --requirepass password (for a Prometheus that "
               "does not send one); /healthz and /readyz are always open");
  app.add_option("--subscription-interval-ms", subscription_options.interval_ms,
                 "Live subscriptions (SUBSCRIBE, /v1/events, /v1/subscribe): a subscriber gets "
                 "at most one value per counter per this many ms, the latest")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  app.add_option("--subscriber-max-pending", subscription_options.max_pending,
                 "A subscriber with more counters than this waiting to be sent (it does not keep "
                 "up) is disconnected, told why")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--subscriber-max-queued-bytes", subscriber_max_queued_bytes,
                 "A subscriber whose connection holds more than this of messages its client has "
                 "not read is disconnected (e.g. 8mb)")
      ->capture_default_str();
  app.add_option("--subscriber-max-subscriptions", subscription_options.max_subscriptions,
                 "Keys plus prefixes one subscriber may follow; a subscribe past it is refused")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--http-allow-origin", subscription_options.allowed_origins,
                 "A web origin (https://example.com, or * for any) whose pages may open a "
                 "WebSocket on /v1/subscribe besides the server's own; repeatable");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();

  try {
    app.parse(argc, argv);
    server.proto_max_bulk_len = ParseBytes(proto_max_bulk_len);
    server.client_query_buffer_limit = ParseBytes(query_buffer_limit);
    server.client_output_buffer_limit = ParseBytes(output_buffer_limit);
    http.max_body_bytes = static_cast<uint64_t>(ParseBytes(http_max_body));
    pg_source.lag_warn_bytes = static_cast<uint64_t>(ParseBytes(source_lag_warn_bytes));
    subscription_options.max_queued_bytes =
        static_cast<size_t>(ParseBytes(subscriber_max_queued_bytes));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tallyd: bad size: %s\n", e.what());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (auto* config = app.get_config_ptr(); config != nullptr && config->count() > 0) {
    server.config_file = config->as<std::string>();
  }

  // Block the stop signals in every thread; the main thread waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::error_code fs_error;
  std::filesystem::create_directories(data_dir, fs_error);
  server.data_dir = std::filesystem::absolute(data_dir).string();
  auto store = tally::storage::RocksDbStore::Open({.path = server.data_dir});
  if (!store) {
    spdlog::critical("{}", store.error().message);
    return 1;
  }

  tally::engine::EngineOptions engine_options;
  engine_options.commit.durability =
      durability == "sync" ? tally::engine::Durability::kSync : tally::engine::Durability::kAsync;
  engine_options.commit.sync_interval_ms = sync_interval_ms;
  engine_options.commit.checkpoint_interval_ms = checkpoint_interval_ms;
  engine_options.commit.commit_on_waiting_thread = group_commit == "inline";
  // Before the engine: the committer feeds histograms of the registry until it stops.
  tally::metrics::Registry metrics;
  tally::programs::RegisterProcessMetrics(metrics);
  tally::engine::Engine engine(store->get(), engine_options);
  tally::engine::RegisterEngineMetrics(engine, metrics, tally::derived::IsInternalKey);
  if (auto status = engine.Start(); !status) {
    spdlog::critical("cannot start the engine: {}", status.error().message);
    return 1;
  }

  tally::derived::DerivedOptions derived_options;
  derived_options.idempotency_window_ms = idempotency_window_seconds * 1000;
  tally::derived::DerivedCounters derived(engine, *store->get(), derived_options);
  if (auto status = derived.Load(); !status) {
    spdlog::critical("cannot load the derived counters: {}", status.error().message);
    engine.Stop();
    return 1;
  }
  if (!definitions_file.empty()) {
    std::ifstream file(definitions_file);
    std::stringstream script;
    script << file.rdbuf();
    auto outcomes = derived.Execute(script.str());
    if (!outcomes) {
      spdlog::critical("{}: {}", definitions_file, outcomes.error().message);
      engine.Stop();
      return 1;
    }
    for (const auto& outcome : *outcomes) spdlog::info("{}: {}", definitions_file, outcome.message);
  }
  // The source object first (it connects only in Start, below): INFO and GET /v1/status
  // read its figures, so it outlives both servers.
  std::unique_ptr<tally::postgres::PostgresSource> source;
  tally::servers::Services services(engine);
  services.derived = &derived;
  services.metrics = &metrics;
  if (!pg_source.conninfo.empty()) {
    source = std::make_unique<tally::postgres::PostgresSource>(engine, derived, pg_source);
    services.source_report = [s = source.get()] { return s->Report(); };
    tally::programs::RegisterSourceMetrics(*source, pg_source.slot, metrics);
    services.readiness = [s = source.get(), ready_max_lag_ms] {
      return tally::programs::SourceReadiness(*s, ready_max_lag_ms);
    };
  }
  tally::programs::RegisterDerivedMetrics(derived, metrics);

  // Live subscriptions, fed by every durable commit; tally's own records are never sent.
  subscription_options.hidden = tally::derived::IsInternalKey;
  tally::engine::SubscriptionHub subscriptions(&engine.keyspace(), subscription_options);
  subscriptions.Attach(engine.committer());
  tally::programs::RegisterSubscriptionMetrics(subscriptions, metrics);
  services.subscriptions = &subscriptions;

  tally::redis::RedisServer redis(services, server);
  if (auto status = redis.Start(); !status) {
    spdlog::critical("{}", status.error().message);
    engine.Stop();
    return 1;
  }
  if (http.bind.empty()) http.bind = server.bind;
  http.password = server.requirepass;
  http.public_metrics = public_metrics;
  tally::http::HttpServer http_server(services, http);
  if (auto status = http_server.Start(); !status) {
    spdlog::critical("{}", status.error().message);
    redis.Stop();
    engine.Stop();
    return 1;
  }
  if (source != nullptr) {
    if (auto status = source->Start(); !status) {
      spdlog::critical("--source: {}", status.error().message);
      http_server.Stop();
      redis.Stop();
      engine.Stop();
      return 1;
    }
  }
  // After the last early return above, each of which stops the engine: the sweeper deletes
  // keys, so it must never run past engine.Stop(). (Load swept once already.)
  derived.StartRetentionSweeper();  // time buckets past their counter's retention go
  // The flusher hands updates to the servers' threads: it runs only while both serve.
  subscriptions.Start();
  spdlog::info(
      "tallyd ready: redis-cli -h {} -p {}, HTTP API on http://{}:{}/ (durability={}, "
      "data in {})",
      server.bind, redis.port(), http.bind, http_server.port(), durability, server.data_dir);

  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("signal {} received: stopping", signal);
  subscriptions.Stop();
  if (source != nullptr) source->Stop();  // a last acknowledgement of what is durable
  http_server.Stop();
  redis.Stop();
  derived.StopRetentionSweeper();
  engine.Stop();
  spdlog::info("all counters committed; bye");
  return 0;
}
