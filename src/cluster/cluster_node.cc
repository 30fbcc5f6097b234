#include "cluster/cluster_node.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "core/repeat_limiter.h"

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kSettleTimeout = std::chrono::seconds(30);

std::string Upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

// The layout message of <NAME>_META.
std::string LayoutText(uint32_t partitions) {
  return fmt::format("tally-cluster 1\npartitions {}\n", partitions);
}

// JetStream answers nothing, or "not available", while a fresh cluster elects its leaders:
// worth asking again. Any other error is final.
bool Settling(const NatsError& error) {
  return error.status == NATS_TIMEOUT || error.status == NATS_NO_RESPONDERS ||
         error.js_code == JSClusterNotAvailErr || error.js_code == JSStreamOfflineErr ||
         error.js_code == JSClusterNoPeersErr || error.js_code == JSInsufficientResourcesErr;
}

}  // namespace

Result<ConnectOptions> NatsConnectOptions(const ClusterOptions& options) {
  ConnectOptions connect;
  connect.servers = options.nats_servers;
  connect.name = fmt::format("tally {}", options.node_name);
  connect.tls = options.nats_tls;
  const bool wanted = connect.tls.any() ||
                      std::any_of(options.nats_servers.begin(), options.nats_servers.end(),
                                  [](const std::string& url) { return url.starts_with("tls://"); });
  if (!wanted) return connect;
  if (connect.tls.cert_file.empty() != connect.tls.key_file.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "TLS to NATS: give both --cluster-nats-tls-cert-file and "
                     "--cluster-nats-tls-key-file, or neither");
  }
  // The name to check is always set from here on: it is also what makes the connection TLS.
  if (connect.tls.server_name.empty() && !options.nats_servers.empty()) {
    const std::string_view host = ParseNatsUrl(options.nats_servers.front()).host;
    if (host.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("TLS to NATS: {} names no host", options.nats_servers.front()));
    }
    for (const std::string& url : options.nats_servers) {
      if (ParseNatsUrl(url).host != host) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("TLS to NATS: the servers' URLs name different hosts ({} and "
                                     "{}); give --cluster-nats-tls-server-name, a name every "
                                     "server's certificate carries",
                                     host, ParseNatsUrl(url).host));
      }
    }
    connect.tls.server_name = host;
  }
  return connect;
}

Result<std::unique_ptr<ClusterNode>> ClusterNode::Open(const ClusterOptions& options,
                                                       const std::string& data_dir) {
  auto connect = NatsConnectOptions(options);
  if (!connect) return tl::unexpected(connect.error());
  // Each JetStream request (a stream's state, a consumer, a message) waits at most this: the
  // coordinator's actor and a stopping node wait no longer for a NATS that cannot answer.
  connect->request_timeout_ms = 2000;
  // Said in the log: a node that stops hearing its NATS server is otherwise only seen by
  // what times out.
  connect->on_disconnected = [] { spdlog::warn("NATS: disconnected from its server"); };
  connect->on_reconnected = [](const std::string& url) {
    spdlog::info("NATS: reconnected to {}", url);
  };
  // Asynchronous errors come by the thousand while JetStream is away (every consumer's
  // missed heartbeats): each text once per 10 s, with how often it came meanwhile.
  connect->on_error = [errors = std::make_shared<RepeatLimiter>(std::chrono::seconds(10))](
                          const std::string& text) {
    const std::optional<uint64_t> held_back = errors->Admit(text);
    if (!held_back) return;
    if (*held_back == 0) {
      spdlog::warn("NATS: {}", text);
    } else {
      spdlog::warn("NATS: {} (and {} more since it was last said)", text, *held_back);
    }
  };
  const bool secure = connect->tls.any();
  const ConnectOptions per_server = *connect;
  auto connection = NatsConnection::Connect(std::move(*connect));
  if (!connection) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("cannot reach NATS{} ({}): {}", secure ? " over TLS" : "",
                                 fmt::join(options.nats_servers, ","), connection.error().message));
  }
  std::unique_ptr<ClusterNode> node(new ClusterNode(options, std::move(*connection)));
  node->leaders_ = LeaderConnections::Open(per_server);
  if (auto status = node->EnsureLayout(); !status) return tl::unexpected(status.error());
  if (auto status = node->EnsureStreams(); !status) return tl::unexpected(status.error());

  ClusterPersistenceOptions persistence;
  persistence.data_dir = data_dir;
  persistence.partition_count = options.partitions;
  persistence.stream_prefix = Upper(options.name) + "_P";
  persistence.subject_prefix = options.name + ".p.";
  persistence.node_name = options.node_name;
  persistence.renew_ms = std::max<int64_t>(options.lease_ms / 4, 1);
  // A claim whose follower cannot read up to the tail in this time is given up (and the
  // follower started again): the partition is not left changing hands for long.
  persistence.catch_up_timeout_ms = std::max<int64_t>(options.lease_ms * 5, 10000);
  persistence.follow_on_load = false;  // StartChanges starts the followers
  persistence.leaders = node->leaders_.get();
  persistence.snapshot_every_records = options.snapshot_every_records;
  persistence.snapshot_stream = Upper(options.name) + "_SNAPSHOTS";
  persistence.snapshot_subject_prefix = options.name + ".snap.";
  auto opened = ClusterPersistence::Open(*node->connection_, std::move(persistence));
  if (!opened) return tl::unexpected(opened.error());
  node->persistence_ = std::move(*opened);
  node->routing_ = std::make_unique<Routing>(options.partitions);
  return node;
}

ClusterNode::ClusterNode(ClusterOptions options, std::unique_ptr<NatsConnection> connection)
    : options_(std::move(options)), connection_(std::move(connection)) {}

ClusterNode::~ClusterNode() { Stop(); }

Status ClusterNode::EnsureLayout() {
  StreamConfig config;
  config.name = Upper(options_.name) + "_META";
  config.subjects = {options_.name + ".meta"};
  config.replicas = options_.replicas;
  const auto deadline = Clock::now() + kSettleTimeout;
  std::string found;
  while (true) {
    NatsError error;
    if (auto state = connection_->EnsureStream(config); !state) {
      error = state.error();
    } else {
      Publication layout;
      layout.subject = config.subjects[0];
      const std::string text = LayoutText(options_.partitions);
      layout.data = text;
      layout.expected_last_seq = 0;
      auto published = connection_->Publish(layout, 5000);
      if (!published && ClassifyPublishFailure(published.error()) != PublishFailure::kWrongLast) {
        error = published.error();
      } else {
        auto first = connection_->GetMessage(config.name, 1);
        if (first && *first) {
          found = (*first)->data;
          break;
        }
        if (!first) error = first.error();
      }
    }
    if (!Settling(error) || Clock::now() >= deadline) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("cluster '{}': cannot read or write its layout: {}",
                                   options_.name, error.ToError().message));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (found != LayoutText(options_.partitions)) {
    std::string count = "an unknown number of";
    if (const size_t at = found.find("partitions "); at != std::string::npos) {
      count = found.substr(at + 11, found.find('\n', at) - at - 11);
    }
    return InvalidArgument(fmt::format(
        "cluster '{}' has {} partitions, not {} (--cluster-partitions must be what the cluster "
        "was created with)",
        options_.name, count, options_.partitions));
  }
  return OkStatus();
}

Status ClusterNode::EnsureStreams() {
  const auto deadline = Clock::now() + kSettleTimeout;
  std::vector<StreamConfig> configs;
  for (uint32_t p = 0; p < options_.partitions; ++p) {
    StreamConfig config;
    config.name = fmt::format("{}_P{}", Upper(options_.name), p);
    config.subjects = {fmt::format("{}.p.{}", options_.name, p)};
    config.replicas = options_.replicas;
    configs.push_back(std::move(config));
  }
  // The definitions and pushes of the derived counters, in one order (change_feed.h); a
  // push's id is remembered as long as the idempotency window.
  StreamConfig changes;
  changes.name = Upper(options_.name) + "_CHANGES";
  changes.subjects = {options_.name + ".changes"};
  changes.replicas = options_.replicas;
  changes.duplicate_window_ms = options_.idempotency_window_ms;
  changes.max_message_bytes = 64 << 20;
  configs.push_back(std::move(changes));
  // The partitions' snapshots (snapshot_store.h): chunks of at most ~256 KB of counters.
  StreamConfig snapshots;
  snapshots.name = Upper(options_.name) + "_SNAPSHOTS";
  snapshots.subjects = {options_.name + ".snap.>"};
  snapshots.replicas = options_.replicas;
  configs.push_back(std::move(snapshots));
  for (const StreamConfig& config : configs) {
    while (true) {
      auto state = connection_->EnsureStream(config);
      if (state) break;
      if (!Settling(state.error()) || Clock::now() >= deadline) {
        return MakeError(
            state.error().ToError().code,
            fmt::format("stream {}: {}", config.name, state.error().ToError().message));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  return OkStatus();
}

MemberInfo ClusterNode::Describe() const {
  MemberInfo info;
  info.node_id = persistence_->node_id();
  info.node_name = node_name_;
  info.redis_address = redis_address_;
  info.http_address = http_address_;
  info.draining = routing_->drain_requested();
  info.checkpointed = persistence_->Checkpointed();
  if (feed_) info.change_floor = feed_->ReadFloor();
  if (const Coordinator* coordinator = heartbeat_coordinator_.load(std::memory_order_acquire)) {
    info.owned = coordinator->Owned();
    info.releasing = coordinator->Releasing();
  }
  return info;
}

Status ClusterNode::Start(const std::string& redis_address, const std::string& http_address,
                          Coordinator::CloseClients close_clients, Coordinator::Barrier barrier) {
  node_name_ = options_.node_name.empty() ? redis_address : options_.node_name;
  redis_address_ = redis_address;
  http_address_ = http_address;
  ClaimBody identity;
  identity.node_name = node_name_;
  identity.redis_address = redis_address;
  identity.http_address = http_address;
  persistence_->SetIdentity(identity);

  MembershipOptions membership;
  membership.subject = options_.name + ".members";
  membership.heartbeat_ms = std::max<int64_t>(options_.lease_ms / 4, 1);
  membership.timeout_ms = options_.lease_ms;
  auto started = Membership::Start(*connection_, membership, [this] { return Describe(); });
  if (!started) return tl::unexpected(started.error());
  membership_ = std::move(*started);
  // Trimming keeps what any node heard from lately will read: not only the live ones, so that
  // a node whose heartbeats are late (a busy machine) or that restarts at once keeps its
  // tail; a node silent for longer, or that said it leaves, restores from snapshots.
  const auto remembered = std::chrono::milliseconds(10 * options_.lease_ms);
  // The lowest of what the nodes that count say (`said` of a node's heartbeat).
  const auto lowest = [membership = membership_.get(), remembered](auto said) {
    uint64_t floor = UINT64_MAX;
    const auto now = std::chrono::steady_clock::now();
    for (const Member& member : membership->All()) {
      if (member.info.leaving || now - member.last_seen > remembered) continue;
      floor = std::min<uint64_t>(floor, std::invoke(said, member.info));
    }
    return floor;
  };
  persistence_->SetTrimFloor([lowest](uint32_t partition) {
    // A node that says nothing of the partition (not checkpointed yet) holds it all.
    return lowest([partition](const MemberInfo& info) {
      return partition < info.checkpointed.size() ? info.checkpointed[partition] : 0;
    });
  });
  if (feed_) {
    // A node that says nothing of the change stream (0) holds it all.
    feed_->SetTrimFloor([lowest] { return lowest(&MemberInfo::change_floor); });
  }

  CoordinatorOptions coordinator;
  coordinator.cluster_name = options_.name;
  coordinator.lease_ms = options_.lease_ms;
  coordinator.claim_step_ms = std::max<int64_t>(options_.lease_ms / 4, 1);
  coordinator.settle_ms = std::max<int64_t>(options_.lease_ms * 3 / 4, 1);
  const auto holding_off_changes = [this](std::function<void()> wait_for_workers) {
    return [this, wait_for_workers = std::move(wait_for_workers)] {
      if (feed_) feed_->HoldOff(true);
      wait_for_workers();
      if (feed_) feed_->HoldOff(false);
    };
  };
  coordinator_ = std::make_unique<Coordinator>(
      *persistence_, *membership_, *routing_, *connection_, coordinator,
      holding_off_changes(std::move(close_clients)), holding_off_changes(std::move(barrier)));
  if (feed_) {
    coordinator_->SetChangeStats([feed = feed_.get(), restored = catalog_restored_] {
      ChangeStreamStats stats = feed->Stats();
      stats.catalog_restored = restored;
      return stats;
    });
  }
  heartbeat_coordinator_.store(coordinator_.get(), std::memory_order_release);
  persistence_->SetOnChange([coordinator = coordinator_.get()] { coordinator->Wake(); });
  coordinator_->Start();
  return OkStatus();
}

Status ClusterNode::StartChanges(engine::Engine& engine, derived::DerivedCounters& derived) {
  persistence_->SetReplicationObserver(
      [&derived](std::span<const engine::CommitBatch* const> batches) {
        derived.OnReplicated(batches);
      },
      [&derived](SlotRange slots) {
        derived.ForgetKeys([slots](std::string_view key) { return slots.Contains(KeySlot(key)); });
      });
  // Only now: every group a follower writes from here on reaches the derived indexes.
  persistence_->StartFollowers();
  feed_ = std::make_unique<ChangeFeed>(*connection_, FeedOptions(), *persistence_, engine, derived);
  return feed_->Start();
}

ChangeFeedOptions ClusterNode::FeedOptions() const {
  ChangeFeedOptions options;
  options.stream = Upper(options_.name) + "_CHANGES";
  options.subject = options_.name + ".changes";
  options.partition_count = options_.partitions;
  options.snapshots = persistence_->snapshots();
  options.trim_every = options_.snapshot_every_records;
  options.keep_ms = options_.idempotency_window_ms;
  return options;
}

Status ClusterNode::RestoreCatalog() {
  auto restored = ChangeFeed::RestoreCatalog(*connection_, FeedOptions(), *persistence_);
  if (!restored) return tl::unexpected(restored.error());
  catalog_restored_ = *restored;
  return OkStatus();
}

void ClusterNode::BeginShutdown() {
  if (coordinator_) coordinator_->Stop();
  if (feed_) feed_->Stop();  // it applies through the engine, which stops next
  if (persistence_) persistence_->BeginShutdown();
}

void ClusterNode::Stop() {
  if (coordinator_) coordinator_->Stop();
  if (feed_) feed_->Stop();
  if (membership_) membership_->Leave();
  if (persistence_) persistence_->Close();
  membership_.reset();
  heartbeat_coordinator_.store(nullptr, std::memory_order_release);
  coordinator_.reset();
  feed_.reset();
}

}  // namespace tally::cluster
