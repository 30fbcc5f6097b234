#include "programs/tallyd_options.h"

#include <algorithm>
#include <chrono>

#include "core/version.h"
#include "engine/databases.h"
#include "programs/byte_size.h"

namespace tally::programs {
namespace {

// Adds an option of a size ("64mb", see byte_size.h) stored in `bytes` as a number of bytes;
// a bad size is an error of that option. `default_text` is what --help shows.
template <typename Bytes>
void AddSizeOption(CLI::App& app, std::string name, Bytes& bytes, std::string help,
                   std::string default_text) {
  const CLI::Validator to_bytes(
      [](std::string& text) -> std::string {
        auto parsed = ParseByteSize(text);
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

void AddTallydOptions(CLI::App& app, TallydOptions* options) {
  app.set_config("--config", "", "Read options from this file (lines of 'name = value')");
  // A misspelt name in the file is an error at start, as in Redis, not a setting silently lost.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_version_flag("--version", "tallyd " + std::string(Version()));

  NodeOptions& node = options->node;
  redis::ServerOptions& server = node.redis;
  http::HttpOptions& http = node.http;
  engine::CommitterOptions& commit = node.engine.commit;
  engine::SubscriptionOptions& subscriptions = node.subscriptions;
  std::string& durability = options->durability;
  std::string& group_commit = options->group_commit;
  std::string& log_level = options->log_level;
  int64_t& idempotency_window_seconds = options->idempotency_window_seconds;
  http.bind.clear();  // empty: the same address as --bind

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
                 "The default user's password: clients must give it with AUTH (or HELLO ... "
                 "AUTH), or HTTP's Authorization, before any command");
  app.add_option("--aclfile", server.aclfile,
                 "Users and their permissions (Redis's ACL file format): read at start when it "
                 "exists, written by ACL SAVE, read again by ACL LOAD");
  app.add_option("--max-auth-failures", node.max_auth_failures,
                 "Failed passwords a client address may send a minute (AUTH, HTTP); past it, "
                 "they are refused unchecked until the minute is over (0 = no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--protected-mode", options->protected_mode,
                 "yes: with no password (no --requirepass, no user with one), serve clients on "
                 "the loopback interface only; no: serve everyone")
      ->check(CLI::IsMember({"yes", "no"}))
      ->capture_default_str();
  app.add_option("--maxclients", server.maxclients, "Most simultaneous client connections")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--databases", server.databases,
                 "Databases SELECT may choose, 0 to N-1, each its own keyspace of plain "
                 "counters; derived counters live in database 0")
      ->check(CLI::Range(1u, engine::kMaxDatabases))
      ->capture_default_str();
  app.add_option("--timeout", server.timeout_seconds,
                 "Close clients idle this many seconds (0 = never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--request-timeout", server.request_timeout_seconds,
                 "Close a client whose request began but has not arrived whole within this "
                 "many seconds, with an error (0 = never)")
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
  options->source_ack_interval_ms = node.source.ack_interval.count();
  app.add_option("--source-ack-interval-ms", options->source_ack_interval_ms,
                 "How often the --source slot is told what tally has made durable (PostgreSQL "
                 "keeps the WAL after it)")
      ->check(CLI::Range(int64_t{10}, int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--ready-max-lag-ms", node.ready_max_lag_ms,
                 "GET /readyz answers 503 while the --source is not streaming or lags more than "
                 "this many ms behind PostgreSQL")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_flag("--public-metrics", http.public_metrics,
               "Serve GET /metrics without the --requirepass password (for a Prometheus that "
               "does not send one); /healthz and /readyz are always open");
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
  tls::TlsOptions& tls = node.tls;
  app.add_option("--tls-port", server.tls_port,
                 "Port for the Redis protocol over TLS (0 = none); needs --tls-cert-file")
      ->capture_default_str();
  app.add_option("--http-tls-port", http.tls_port,
                 "Port for the HTTP API over TLS, HTTPS (0 = none); needs --tls-cert-file")
      ->capture_default_str();
  app.add_option("--plain-ports", options->plain_ports,
                 "no: listen on the TLS ports only (--port and --http-port are not opened)")
      ->check(CLI::IsMember({"yes", "no"}))
      ->capture_default_str();
  app.add_option("--tls-cert-file", tls.cert_file,
                 "The TLS ports' certificate chain (PEM); SIGHUP reads it again")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key-file", tls.key_file, "The certificate's private key (PEM)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-ca-cert-file", tls.ca_cert_file,
                 "CA certificates (PEM) that sign the client certificates of the Redis TLS port")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-auth-clients", options->tls_auth_clients,
                 "Redis TLS port: yes = a client certificate is required, optional = checked "
                 "when given, no = not asked for")
      ->check(CLI::IsMember({"yes", "no", "optional"}))
      ->capture_default_str();
  app.add_option("--tls-protocols", tls.protocols,
                 "TLS versions offered: TLSv1.2 and/or TLSv1.3 (older ones are refused)")
      ->capture_default_str();
  app.add_option("--tls-ciphers", tls.ciphers,
                 "TLS 1.2 cipher list, OpenSSL's syntax (default: OpenSSL's)");
  app.add_option("--tls-ciphersuites", tls.ciphersuites,
                 "TLS 1.3 cipher suites, OpenSSL's syntax (default: OpenSSL's)");
  cluster::ClusterOptions& cluster = node.cluster;
  app.add_option("--cluster-nats", cluster.nats_servers,
                 "Join a cluster over these NATS servers (nats://host:port, comma-separated); "
                 "without: a single node on the embedded store")
      ->delimiter(',');
  cluster::NatsTlsOptions& nats_tls = cluster.nats_tls;
  app.add_option("--cluster-nats-tls-ca-cert-file", nats_tls.ca_cert_file,
                 "TLS to NATS: CA certificates (PEM) that sign the servers' certificates "
                 "(default: the system's). Any --cluster-nats-tls-* option, or a tls:// URL, "
                 "turns TLS on")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-nats-tls-cert-file", nats_tls.cert_file,
                 "TLS to NATS: this node's certificate (PEM), for servers that verify clients")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-nats-tls-key-file", nats_tls.key_file,
                 "TLS to NATS: the private key of --cluster-nats-tls-cert-file (PEM)")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-nats-tls-server-name", nats_tls.server_name,
                 "TLS to NATS: the name every server's certificate must carry (default: the "
                 "host of the --cluster-nats URLs, when they name one)");
  app.add_option("--cluster-partitions", cluster.partitions,
                 "How many partitions the hash slots are split into; fixed when the cluster "
                 "is created")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--cluster-replicas", cluster.replicas,
                 "Replicas of each partition's stream on the NATS servers (3: one may be lost)")
      ->check(CLI::Range(1, 5))
      ->capture_default_str();
  app.add_option("--cluster-name", cluster.name,
                 "The cluster's name, in its streams' and subjects' names: [a-z0-9_-], at most "
                 "32 characters")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            const bool ok = !text.empty() && text.size() <= 32 &&
                            text.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") ==
                                std::string::npos;
            return ok ? "" : "a cluster name is 1-32 of a-z, 0-9, _ and -";
          },
          "NAME"))
      ->capture_default_str();
  app.add_option("--cluster-node-name", cluster.node_name,
                 "This node's name in CLUSTER NODES and the logs (default: its announced "
                 "host:port)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            const bool ok =
                !text.empty() && text.size() <= 128 &&
                std::all_of(text.begin(), text.end(), [](char c) { return c > ' ' && c < 127; });
            return ok ? "" : "a node name is 1-128 printable characters without spaces";
          },
          "NAME"));
  app.add_option("--cluster-announce-host", cluster.announce_host,
                 "The address clients and the other nodes reach this node at, in MOVED and "
                 "CLUSTER SLOTS (default: the --bind address; 127.0.0.1 when that is a "
                 "wildcard)");
  app.add_option("--cluster-lease-ms", cluster.lease_ms,
                 "A partition's owner silent this long is replaced by a standby")
      ->check(CLI::Range(int64_t{200}, int64_t{600000}))
      ->capture_default_str();
  app.add_option("--cluster-snapshot-records", cluster.snapshot_every_records,
                 "An owned partition gets a snapshot once its stream has grown by this many "
                 "records since the last one, and its stream is trimmed below it (0: never)")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
}

void FinishTallydOptions(const CLI::App& app, TallydOptions* options) {
  NodeOptions& node = options->node;
  if (const CLI::Option* config = app.get_config_ptr(); config != nullptr && config->count() > 0) {
    node.redis.config_file = config->as<std::string>();
  }
  engine::CommitterOptions& commit = node.engine.commit;
  commit.durability =
      options->durability == "sync" ? engine::Durability::kSync : engine::Durability::kAsync;
  commit.commit_on_waiting_thread = options->group_commit == "inline";
  node.derived.idempotency_window_ms = options->idempotency_window_seconds * 1000;
  node.cluster.idempotency_window_ms = node.derived.idempotency_window_ms;
  node.source.ack_interval = std::chrono::milliseconds(options->source_ack_interval_ms);
  if (node.http.bind.empty()) node.http.bind = node.redis.bind;
  node.http.password = node.redis.requirepass;  // one password for both protocols
  // Checked by IsMember while parsing. Client certificates are asked on the Redis TLS port
  // only: with HTTPS alone there is none to check, and no CA file is needed.
  node.tls.auth_clients = node.redis.tls_port == 0
                              ? tls::ClientAuth::kNo
                              : *tls::ParseClientAuth(options->tls_auth_clients);
  node.redis.plain = node.http.plain = options->plain_ports == "yes";
  node.redis.protected_mode = node.http.protected_mode = options->protected_mode == "yes";
  cluster::ClusterOptions& cluster = node.cluster;
  if (cluster.announce_host.empty()) {
    const std::string& bind = node.redis.bind;
    cluster.announce_host = bind == "0.0.0.0" || bind == "::" || bind.empty() ? "127.0.0.1" : bind;
  }
}

}  // namespace tally::programs
