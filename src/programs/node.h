// Node: one tally server process's parts, wired together — the store, the engine (with its
// hot keys), the derived counters and their retention sweeper, the PostgreSQL source, the live
// subscriptions, the Redis and HTTP servers, and the metrics they all report to.
//
// Start() builds and starts the parts in order, each after what it uses; Stop() stops them in
// the reverse order. Every part that started registers how it stops, so a failed Start() stops
// exactly what had started, and a new part (a cluster membership, say) is one more step.
// Threads: Start and Stop from one thread (tallyd's main).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/cluster_options.h"
#include "core/metrics.h"
#include "core/status.h"
#include "engine/derived/derived_counters.h"
#include "engine/engine.h"
#include "engine/subscriptions.h"
#include "servers/auth/acl.h"
#include "servers/http/http_options.h"
#include "servers/redis/server_options.h"
#include "servers/tls/tls_context.h"
#include "sources/postgres/postgres_source.h"

namespace tally::storage {
class RocksDbStore;
}
namespace tally::cluster {
class ClusterNode;
class SourceRunner;
}  // namespace tally::cluster
namespace tally::redis {
class RedisServer;
}
namespace tally::http {
class HttpServer;
}

namespace tally::programs {

// Everything a node is told. Each part's options name the tallyd options they come from.
struct NodeOptions {
  std::string data_dir = "./data";  // --data-dir: the store's directory, created when missing
  engine::EngineOptions engine;     // --durability, --sync-interval-ms, --group-commit...
  derived::DerivedOptions derived;  // --idempotency-window
  // --definitions: a SQL script of CREATE SOURCE / CREATE COUNTER statements applied once the
  // counters are loaded (statements already in effect are no-ops); empty = none.
  std::string definitions_file;
  // --bind, --port, --workers, --requirepass (the default user's password), --aclfile (read
  // at start when it exists)... Its data_dir is set by the node (the absolute --data-dir).
  redis::ServerOptions redis;
  http::HttpOptions http;  // --http-*
  // --tls-*: the certificate of both servers' TLS ports (redis.tls_port, http.tls_port).
  tls::TlsOptions tls;
  // --max-auth-failures: failed passwords (AUTH, HTTP) a client address may send a minute;
  // past it, its AUTHs are refused unchecked until the minute is over. 0 = no limit.
  int64_t max_auth_failures = 10;
  postgres::PostgresSourceOptions source;  // --source...; an empty conninfo: no source
  // --ready-max-lag-ms: GET /readyz answers 503 while the source lags more than this.
  int64_t ready_max_lag_ms = 10000;
  // --subscription-interval-ms, --subscriber-*, --http-allow-origin. Its `hidden` is set by
  // the node (tally's own records are never sent).
  engine::SubscriptionOptions subscriptions;
  // --cluster-*: with NATS servers, the node joins a cluster (its store: the partition
  // streams and a local view of them, cluster/cluster_node.h); without, it is a single node.
  cluster::ClusterOptions cluster;
};

class Node {
 public:
  explicit Node(NodeOptions options);
  ~Node();  // Stops (see Stop()).
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Opens the store and starts every part, in order. On an error, stops what had started and
  // returns the error, whose message names the part ("cannot start the engine: ...",
  // "--source: ..."). Call once.
  Status Start();

  // Stops what started, in reverse order: the subscriptions' flusher, the source (a last
  // acknowledgement of what is durable), the HTTP and Redis servers, the retention sweeper,
  // and last the engine, which commits and fsyncs everything. Safe to call more than once.
  void Stop();

  // Reads the TLS certificate, key and CA files again (tallyd's SIGHUP): new TLS connections
  // use them, open ones keep theirs. On an error (or without TLS) nothing changes. Any thread
  // while the node runs.
  Status ReloadTls();

  // Valid after a successful Start(); 0 for a port not listened on.
  uint16_t redis_port() const;
  uint16_t http_port() const;
  uint16_t redis_tls_port() const;
  uint16_t http_tls_port() const;
  // The absolute --data-dir.
  const std::string& data_dir() const { return options_.redis.data_dir; }
  const NodeOptions& options() const { return options_; }

 private:
  // The steps of Start(), in order; each registers how what it started stops (OnStop).
  Status StartParts();
  Status LoadTls();
  Status LoadUsers();
  Status OpenStore();
  Status OpenClusterStore();
  Status StartEngine();
  Status LoadCounters();
  void PrepareSource();
  void PrepareSubscriptions();
  Status StartServers();
  Status StartCluster();
  Status StartSource();
  void OnStop(std::function<void()> stop) { stops_.push_back(std::move(stop)); }

  NodeOptions options_;
  // Declared in the order of building, so that each part is destroyed before what it uses:
  // the registry first (the engine's committer feeds its histograms until it stops).
  metrics::Registry metrics_;
  std::unique_ptr<storage::RocksDbStore> store_;   // a single node's store
  std::unique_ptr<cluster::ClusterNode> cluster_;  // or a cluster node's
  engine::Persistence* persistence_ = nullptr;     // whichever of the two it is
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<derived::DerivedCounters> derived_;
  // Built before the servers and started after them: INFO and GET /v1/status read its figures.
  std::unique_ptr<postgres::PostgresSource> source_;      // a single node's source
  std::unique_ptr<cluster::SourceRunner> source_runner_;  // or a cluster node's
  std::unique_ptr<engine::SubscriptionHub> subscriptions_;
  std::unique_ptr<tls::TlsContext> tls_;  // null without TLS
  std::unique_ptr<auth::Acl> acl_;        // the users of both servers
  std::unique_ptr<redis::RedisServer> redis_;
  std::unique_ptr<http::HttpServer> http_;
  std::vector<std::function<void()>> stops_;  // of what started, in the order it started
};

}  // namespace tally::programs
