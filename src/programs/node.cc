#include "programs/node.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cluster/cluster_node.h"
#include "cluster/source_runner.h"
#include "engine/engine_metrics.h"
#include "programs/monitoring.h"
#include "servers/http/server.h"
#include "servers/http/shown_values.h"
#include "servers/redis/acl_commands.h"
#include "servers/redis/server.h"
#include "servers/services.h"
#include "storage/rocksdb_store.h"

namespace tally::programs {
namespace {

// `error` with what failed in front: "cannot start the engine: <why>".
tl::unexpected<Error> Failed(std::string_view what, const Error& error) {
  return MakeError(error.code, fmt::format("{}: {}", what, error.message));
}

}  // namespace

Node::Node(NodeOptions options) : options_(std::move(options)) {}

Node::~Node() { Stop(); }

uint16_t Node::redis_port() const { return redis_ == nullptr ? 0 : redis_->port(); }

uint16_t Node::http_port() const { return http_ == nullptr ? 0 : http_->port(); }

uint16_t Node::redis_tls_port() const { return redis_ == nullptr ? 0 : redis_->tls_port(); }

uint16_t Node::http_tls_port() const { return http_ == nullptr ? 0 : http_->tls_port(); }

Status Node::ReloadTls() {
  if (tls_ == nullptr) return InvalidArgument("no TLS to reload (no --tls-cert-file)");
  return tls_->Reload();
}

Status Node::Start() {
  Status status = StartParts();
  if (!status) Stop();
  return status;
}

Status Node::StartParts() {
  if (options_.cluster.enabled()) {
    // Not in a cluster: acknowledging before the stream has a write would lose it in a
    // failover.
    if (options_.engine.commit.durability != engine::Durability::kSync) {
      return InvalidArgument("--durability async is not offered in a cluster");
    }
  }
  // First: they need nothing of the store, and a bad certificate, port choice or aclfile is
  // then refused before the commit log is replayed.
  if (auto status = LoadTls(); !status) return status;
  if (auto status = LoadUsers(); !status) return status;
  if (auto status = OpenStore(); !status) return status;
  if (auto status = StartEngine(); !status) return status;
  if (auto status = LoadCounters(); !status) return status;
  PrepareSource();
  PrepareSubscriptions();
  if (auto status = StartServers(); !status) return status;
  if (auto status = StartCluster(); !status) return status;
  if (auto status = StartSource(); !status) return status;
  // The flusher hands updates to the servers' threads: it runs only while they serve.
  subscriptions_->Start();
  OnStop([this] { subscriptions_->Stop(); });
  return OkStatus();
}

void Node::Stop() {
  while (!stops_.empty()) {
    std::function<void()> stop = std::move(stops_.back());
    stops_.pop_back();
    stop();
  }
}

Status Node::OpenStore() {
  std::error_code ignored;
  std::filesystem::create_directories(options_.data_dir, ignored);
  options_.redis.data_dir = std::filesystem::absolute(options_.data_dir).string();
  if (options_.cluster.enabled()) return OpenClusterStore();
  auto store = storage::RocksDbStore::Open({.path = options_.redis.data_dir});
  if (!store) return tl::make_unexpected(store.error());
  store_ = std::move(*store);
  persistence_ = store_.get();
  return OkStatus();
}

Status Node::OpenClusterStore() {
  auto node = cluster::ClusterNode::Open(options_.cluster, options_.redis.data_dir);
  if (!node) return Failed("cannot join the cluster", node.error());
  cluster_ = std::move(*node);
  persistence_ = &cluster_->persistence();
  // Last of all (registered first): the followers apply to the engine's keyspace until then.
  OnStop([this] { cluster_->Stop(); });
  return OkStatus();
}

Status Node::StartEngine() {
  RegisterProcessMetrics(metrics_);
  engine_ = std::make_unique<engine::Engine>(persistence_, options_.engine);
  RegisterEngineMetrics(*engine_, metrics_, derived::IsInternalKey);
  if (cluster_ != nullptr) cluster_->persistence().Attach(engine_->keyspace());
  if (auto status = engine_->Start(); !status) {
    return Failed("cannot start the engine", status.error());
  }
  OnStop([this] { engine_->Stop(); });
  if (cluster_ != nullptr) {
    // Once the servers stopped (no reply leaves any more), before the engine's last commit:
    // no more claims, and the last commits wait a bounded time for their streams.
    OnStop([this] { cluster_->BeginShutdown(); });
  }
  return OkStatus();
}

Status Node::LoadCounters() {
  // A cluster's source consumer redoes an interrupted backfill through the change stream.
  options_.derived.keep_interrupted_backfills = cluster_ != nullptr;
  if (cluster_ != nullptr) {
    // The catalog from the change stream's snapshot, when its messages since are all this
    // node can read (the stream was trimmed past its catalog).
    if (auto status = cluster_->RestoreCatalog(); !status) {
      return Failed("cannot restore the catalog from the cluster", status.error());
    }
  }
  derived_ = std::make_unique<derived::DerivedCounters>(*engine_, *persistence_, options_.derived);
  if (auto status = derived_->Load(); !status) {
    return Failed("cannot load the derived counters", status.error());
  }
  if (cluster_ != nullptr) {
    // Definitions and pushes through the cluster's change stream, from now on.
    if (auto status = cluster_->StartChanges(*engine_, *derived_); !status) {
      return Failed("cannot read the cluster's change stream", status.error());
    }
  }
  const std::string& file = options_.definitions_file;
  if (!file.empty()) {
    std::ifstream in(file);
    std::stringstream script;
    script << in.rdbuf();
    if (!in) return IOError(fmt::format("{}: cannot read the file", file));
    // In a cluster the file goes to every node (statements already in effect are no-ops).
    auto outcomes = cluster_ != nullptr ? cluster_->changes()->Define(script.str())
                                        : derived_->Execute(script.str());
    if (!outcomes) {
      return Failed(file, outcomes.error());
    }
    for (const auto& outcome : *outcomes) spdlog::info("{}: {}", file, outcome.message);
  }
  RegisterDerivedMetrics(*derived_, metrics_);
  // Time buckets past their counter's retention go (Load swept once already). The sweeper
  // deletes keys, so it stops before the engine does.
  derived_->StartRetentionSweeper();
  OnStop([this] { derived_->StopRetentionSweeper(); });
  return OkStatus();
}

void Node::PrepareSource() {
  if (options_.source.conninfo.empty()) return;
  if (cluster_ != nullptr) {
    // One consumer in the cluster, on partition 0's owner (cluster/source_runner.h).
    source_runner_ = std::make_unique<cluster::SourceRunner>(
        cluster_->persistence(), *cluster_->feed(), *engine_, *derived_, options_.source);
    RegisterSourceMetrics([runner = source_runner_.get()] { return runner->ConsumerStats(); },
                          options_.source.slot, metrics_);
    return;
  }
  // Built now, started once the servers serve: they report its figures from the start.
  source_ = std::make_unique<postgres::PostgresSource>(*engine_, *derived_, options_.source);
  RegisterSourceMetrics([source = source_.get()] { return std::optional(source->stats()); },
                        options_.source.slot, metrics_);
}

void Node::PrepareSubscriptions() {
  // Fed by every durable commit; tally's own records are never sent; a derived group whose
  // value is more than its key's integer is sent as reads show it.
  options_.subscriptions.hidden = derived::IsInternalKey;
  options_.subscriptions.shower =
      std::make_shared<http::DerivedValueShower>(*derived_, engine_->committer());
  subscriptions_ =
      std::make_unique<engine::SubscriptionHub>(&engine_->keyspace(), options_.subscriptions);
  subscriptions_->Attach(engine_->committer());
  RegisterSubscriptionMetrics(*subscriptions_, metrics_);
}

Status Node::LoadTls() {
  if ((!options_.redis.plain && options_.redis.tls_port == 0) ||
      (!options_.http.plain && options_.http.tls_port == 0)) {
    return InvalidArgument(
        "--plain-ports no needs both --tls-port and --http-tls-port (a server would listen "
        "nowhere)");
  }
  const bool tls_ports = options_.redis.tls_port != 0 || options_.http.tls_port != 0;
  if (!options_.tls.enabled()) {
    if (tls_ports) return InvalidArgument("--tls-port and --http-tls-port need --tls-cert-file");
    return OkStatus();
  }
  if (!tls_ports) {
    return InvalidArgument("--tls-cert-file is given but no --tls-port nor --http-tls-port");
  }
  auto context = tls::TlsContext::Create(options_.tls);
  if (!context) return tl::make_unexpected(context.error());
  tls_ = std::move(*context);
  return OkStatus();
}

Status Node::LoadUsers() {
  acl_ = std::make_unique<auth::Acl>(redis::AclCommandInfo(), options_.redis.requirepass);
  acl_->set_max_auth_failures(options_.max_auth_failures);
  const std::string& file = options_.redis.aclfile;
  if (file.empty()) return OkStatus();
  if (!std::filesystem::exists(file)) {
    spdlog::info("--aclfile {} does not exist yet: ACL SAVE will write it", file);
    return OkStatus();
  }
  if (auto status = acl_->Load(file); !status) return Failed("--aclfile", status.error());
  spdlog::info("{} user(s) loaded from {}", acl_->Users().size(), file);
  return OkStatus();
}

Status Node::StartServers() {
  servers::Services services(*engine_);
  services.derived = derived_.get();
  services.subscriptions = subscriptions_.get();
  services.metrics = &metrics_;
  services.tls = tls_.get();
  services.acl = acl_.get();
  if (cluster_ != nullptr) {
    services.cluster = &cluster_->routing();
    services.cluster_changes = cluster_->changes();
  }
  if (source_runner_ != nullptr) {
    services.source_report = [runner = source_runner_.get()] { return runner->Report(); };
    // The node that consumes the source answers for it; the others serve whatever it does.
    services.readiness = [runner = source_runner_.get(), max_lag_ms = options_.ready_max_lag_ms] {
      const std::optional<postgres::PostgresSource::Stats> stats = runner->ConsumerStats();
      return stats ? SourceReadiness(*stats, max_lag_ms) : OkStatus();
    };
  }
  if (source_ != nullptr) {
    services.source_report = [source = source_.get()] { return source->Report(); };
    services.readiness = [source = source_.get(), max_lag_ms = options_.ready_max_lag_ms] {
      return SourceReadiness(source->stats(), max_lag_ms);
    };
  }
  redis_ = std::make_unique<redis::RedisServer>(services, options_.redis);
  if (auto status = redis_->Start(); !status) return status;
  OnStop([this] { redis_->Stop(); });
  http_ = std::make_unique<http::HttpServer>(services, options_.http);
  if (auto status = http_->Start(); !status) return status;
  OnStop([this] { http_->Stop(); });
  return OkStatus();
}

Status Node::StartCluster() {
  if (cluster_ == nullptr) return OkStatus();
  const std::string& host = options_.cluster.announce_host;
  const std::string redis_address = fmt::format("{}:{}", host, redis_port());
  const std::string http_address = http_port() != 0 ? fmt::format("{}:{}", host, http_port()) : "";
  // A partition this node owned was taken over: close every client that may wait for one of
  // its writes before the loss is finished. A worker that does not answer (it cannot happen
  // while the loops run) would leave such a reply to be sent: stop the process instead.
  // Both run on the coordinator's thread (ClusterNode::Start lets pushes and definitions go
  // meanwhile).
  auto close_clients = [this] {
    const bool closed = redis_->CloseWaitingClients(std::chrono::seconds(10));
    if (!closed) {
      spdlog::critical(
          "a Redis worker did not close its waiting clients in time: stopping, so "
          "that no reply of a lost write is ever sent");
      std::abort();
    }
  };
  // Before a partition is handed over: every increment a worker took for it is in the
  // keyspace, so that the hand-over waits for it to be durable. Past the bound, such an
  // increment could be folded after the hand-over and acknowledged unreplicated: stop instead.
  auto barrier = [this] {
    const bool folded = redis_->FoldIncrements(std::chrono::seconds(10));
    if (!folded) {
      spdlog::critical(
          "a Redis worker did not fold its increments in time: stopping, so that "
          "no write to a partition handed over is acknowledged");
      std::abort();
    }
  };
  if (auto status = cluster_->Start(redis_address, http_address, close_clients, barrier); !status) {
    return Failed("cannot start the cluster's membership", status.error());
  }
  spdlog::info("cluster '{}': node {} ({}) at {}, {} partitions", options_.cluster.name,
               cluster_->node_name(), cluster_->persistence().node_id(), redis_address,
               options_.cluster.partitions);
  return OkStatus();
}

Status Node::StartSource() {
  if (source_runner_ != nullptr) {
    source_runner_->Start();
    OnStop([this] { source_runner_->Stop(); });
    return OkStatus();
  }
  if (source_ == nullptr) return OkStatus();
  if (auto status = source_->Start(); !status) {
    return Failed("--source", status.error());
  }
  // A last acknowledgement of what is durable.
  OnStop([this] { source_->Stop(); });
  return OkStatus();
}

}  // namespace tally::programs
