// tallyd: the tally server. Reads its options (command line, --config file) into NodeOptions,
// starts a Node (node.h), serves until SIGINT or SIGTERM, then stops the node, which commits
// and fsyncs everything before tallyd exits. Exit status: 0 after a stop by signal, 1 when
// the node cannot start (the log says why), CLI11's for a bad option.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <string>

#include "core/version.h"
#include "programs/byte_size.h"
#include "programs/node.h"

namespace {

// Adds an option of a size ("64mb", see byte_size.h) stored in `bytes` as a number of bytes;
// a bad size is an error of that option. `default_text` is what --help shows.
template <typename Bytes>
void AddSizeOption(CLI::App& app, std::string name, Bytes& bytes, std::string help,
                   std::string default_text) {
  const CLI::Validator to_bytes(
      [](std::string& text) -> std::string {
        auto parsed = tally::programs::ParseByteSize(text);
        if (!parsed) return parsed.error().message;
        text = std::to_string(*parsed);
        return {};
      },
      "");
  app.add_option(std::move(name), bytes, std::move(help))
      ->transform(to_bytes)
      ->type_name("SIZE")
      ->default_str(std::move(default_text));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tallyd: exact, durable counters over the Redis protocol, on an embedded RocksDB "
      "store"};
  app.set_config("--config", "", "Read options from this file (lines of 'name = value')");
  app.set_version_flag("--version", "tallyd " + std::string(tally::Version()));
  app.get_formatter()->column_width(44);

  tally::programs::NodeOptions node;
  tally::redis::ServerOptions& server = node.redis;
  tally::http::HttpOptions& http = node.http;
  tally::engine::CommitterOptions& commit = node.engine.commit;
  std::string durability = "sync";
  std::string group_commit = "inline";
  std::string log_level = "info";
  http.bind.clear();  // empty: the same address as --bind
  int64_t idempotency_window_seconds = 24 * 3600;

  app.add_option("--bind", server.bind, "Address to listen on")->capture_default_str();
  app.add_option("--port", server.port, "Port for the Redis protocol (0 = any free port)")
      ->capture_default_str();
  app.add_option("--data-dir", node.data_dir, "Directory of the embedded RocksDB store")
      ->capture_default_str();
  app.add_option("--durability", durability,
                 "sync: acknowledge an increment once it is fsync'd (group commit); "
                 "async: acknowledge at once, fsync every --sync-interval-ms")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  app.add_option("--sync-interval-ms", commit.sync_interval_ms,
                 "In async mode, how often the write-ahead log is fsync'd")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  app.add_option("--checkpoint-interval-ms", commit.checkpoint_interval_ms,
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
  AddSizeOption(app, "--proto-max-bulk-len", server.proto_max_bulk_len,
                "Largest bulk string a request may carry (e.g. 512mb)", "512mb");
  app.add_option("--max-multibulk-length", server.max_multibulk_length,
                 "Most arguments in one request")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31))
      ->capture_default_str();
  AddSizeOption(app, "--client-query-buffer-limit", server.client_query_buffer_limit,
                "Unprocessed input one client may accumulate before it is closed", "1gb");
  AddSizeOption(app, "--client-output-buffer-limit", server.client_output_buffer_limit,
                "Unsent replies one client may accumulate before it is closed (a client that "
                "does not read its replies)",
                "256mb");
  app.add_option("--definitions", node.definitions_file,
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
  AddSizeOption(app, "--http-max-body", http.max_body_bytes,
                "Largest HTTP request body (e.g. 64mb); a larger one gets 413", "64mb");
  app.add_option("--http-max-connections", http.max_connections,
                 "Most simultaneous HTTP connections; more get 503")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--http-timeout", http.idle_timeout_seconds,
                 "Close an HTTP connection whose next request has not arrived whole, or whose "
                 "response could not be sent, within this many seconds (0 = never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31))
      ->capture_default_str();
  app.add_option("--source", node.source.conninfo,
                 "PostgreSQL to follow (libpq connection string, postgresql://user:pw@host/db "
                 "or key=value): the tables named like the sources that counters read are "
                 "backfilled, then kept by logical replication");
  app.add_option("--source-slot", node.source.slot,
                 "Logical replication slot tally creates and consumes on the --source database")
      ->capture_default_str();
  app.add_option("--source-publication", node.source.publication,
                 "Publication tally creates (or extends) for the source tables")
      ->capture_default_str();
  AddSizeOption(app, "--source-lag-warn-bytes", node.source.lag_warn_bytes,
                "Warn when the stream is this far behind the database's WAL (e.g. 1gb)", "1gb");
  app.add_option("--ready-max-lag-ms", node.ready_max_lag_ms,
                 "GET /readyz answers 503 while the --source is not streaming or lags more than "
                 "this many ms behind PostgreSQL")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_flag("--public-metrics", http.public_metrics,
               "Serve GET /metrics without the --requirepass password (for a Prometheus that "
               "does not send one); /healthz and /readyz are always open");
  tally::engine::SubscriptionOptions& subscriptions = node.subscriptions;
  app.add_option("--subscription-interval-ms", subscriptions.interval_ms,
                 "Live subscriptions (SUBSCRIBE, /v1/events, /v1/subscribe): a subscriber gets "
                 "at most one value per counter per this many ms, the latest")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  app.add_option("--subscriber-max-pending", subscriptions.max_pending,
                 "A subscriber with more counters than this waiting to be sent (it does not keep "
                 "up) is disconnected, told why")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  AddSizeOption(app, "--subscriber-max-queued-bytes", subscriptions.max_queued_bytes,
                "A subscriber whose connection holds more than this of messages its client has "
                "not read is disconnected (e.g. 8mb)",
                "8mb");
  app.add_option("--subscriber-max-subscriptions", subscriptions.max_subscriptions,
                 "Keys plus prefixes one subscriber may follow; a subscribe past it is refused")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--http-allow-origin", subscriptions.allowed_origins,
                 "A web origin (https://example.com, or * for any) whose pages may open a "
                 "WebSocket on /v1/subscribe besides the server's own; repeatable");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (auto* config = app.get_config_ptr(); config != nullptr && config->count() > 0) {
    server.config_file = config->as<std::string>();
  }
  commit.durability =
      durability == "sync" ? tally::engine::Durability::kSync : tally::engine::Durability::kAsync;
  commit.commit_on_waiting_thread = group_commit == "inline";
  node.derived.idempotency_window_ms = idempotency_window_seconds * 1000;
  if (http.bind.empty()) http.bind = server.bind;
  http.password = server.requirepass;  // one password for both protocols

  // Block the stop signals in every thread (the node's start them); the main thread waits
  // for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  tally::programs::Node tallyd(std::move(node));
  if (auto status = tallyd.Start(); !status) {
    spdlog::critical("{}", status.error().message);
    return 1;
  }
  spdlog::info(
      "tallyd ready: redis-cli -h {} -p {}, HTTP API on http://{}:{}/ (durability={}, "
      "data in {})",
      tallyd.options().redis.bind, tallyd.redis_port(), tallyd.options().http.bind,
      tallyd.http_port(), durability, tallyd.data_dir());

  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("signal {} received: stopping", signal);
  tallyd.Stop();
  spdlog::info("all counters committed; bye");
  return 0;
}
