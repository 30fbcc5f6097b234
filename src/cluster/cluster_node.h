// ClusterNode: a tally node's part in a cluster, built and started in two steps around the
// engine: Open (before the engine: the NATS connection, the cluster's layout, the partition
// streams, and ClusterPersistence, which the engine commits through), then Start (once the
// servers listen, so that claims and heartbeats carry their addresses: Membership and the
// Coordinator). Stop in reverse: BeginShutdown before the engine stops, Stop after.
//
// The cluster's layout is one message in the stream <NAME>_META, written by the first node
// ever to start (expected last sequence 0): the partition count. Every later node reads it
// and refuses to start with another count.
//
// Threads: Open, Start, BeginShutdown and Stop from one thread (the node's); the accessors
// from any.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "cluster/change_feed.h"
#include "cluster/cluster_options.h"
#include "cluster/cluster_persistence.h"
#include "cluster/coordinator.h"
#include "cluster/membership.h"
#include "cluster/nats_client.h"
#include "cluster/routing.h"
#include "core/status.h"

namespace tally::cluster {

// How a node connects to NATS: options' servers, and TLS when a --cluster-nats-tls-* option is
// given or a URL starts with tls://. The name checked in the servers' certificates is the one
// given, or else the host every URL names. kInvalidArgument when TLS is wanted, no name is
// given and the URLs name different hosts, or when only one of a certificate and its key is.
Result<ConnectOptions> NatsConnectOptions(const ClusterOptions& options);

class ClusterNode {
 public:
  // Connects, checks or writes the layout, ensures every partition's stream (waiting, at most
  // 30 s, while JetStream elects its leaders) and opens the local store in `data_dir`.
  static Result<std::unique_ptr<ClusterNode>> Open(const ClusterOptions& options,
                                                   const std::string& data_dir);
  ~ClusterNode();  // Stop()s.
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  ClusterPersistence& persistence() { return *persistence_; }
  Routing& routing() { return *routing_; }
  const ClusterOptions& options() const { return options_; }
  NatsConnection& connection() { return *connection_; }

  // Starts the heartbeats and the coordinator. `redis_address` and `http_address` are
  // host:port as clients reach them (the node's name, when options().node_name is empty, is
  // its Redis address); `close_clients` and `barrier` as the Coordinator's, each run with the
  // change feed held off (ChangeFeed::HoldOff): both need every worker back within their
  // bound, and a worker blocked in a push or a definition (a cluster round trip) is let go.
  // REQUIRES: the persistence loaded (the engine started).
  Status Start(const std::string& redis_address, const std::string& http_address,
               Coordinator::CloseClients close_clients, Coordinator::Barrier barrier);
  // The node's name (after Start).
  const std::string& node_name() const { return node_name_; }
  // Before the derived counters load: a node whose catalog position is gone from the change
  // stream (trimmed: a new node, one down meanwhile) gets the newest catalog snapshot's
  // records (ChangeFeed::RestoreCatalog).
  Status RestoreCatalog();
  // Starts the derived counters' part (change_feed.h): the feed of the cluster's change
  // stream, and the indexes kept in step with what the followers apply — and only then the
  // followers (the engine's Load left them waiting). Once `derived` is loaded, before the
  // servers serve and before Start. REQUIRES: `engine` and `derived` outlive Stop().
  Status StartChanges(engine::Engine& engine, derived::DerivedCounters& derived);
  // Where the servers send the derived counters' writes (null before StartChanges).
  ChangeFront* changes() { return feed_.get(); }
  ChangeFeed* feed() { return feed_.get(); }
  // The node stops: no more claims, no more pushes applied; commits wait a bounded time for
  // their streams. Before the engine stops.
  void BeginShutdown();
  // Says goodbye (the others claim this node's partitions at once) and closes the streams'
  // readers and writers. After the engine stopped. Idempotent.
  void Stop();

 private:
  ClusterNode(ClusterOptions options, std::unique_ptr<NatsConnection> connection);
  Status EnsureLayout();
  Status EnsureStreams();
  MemberInfo Describe() const;
  ChangeFeedOptions FeedOptions() const;

  const ClusterOptions options_;
  std::unique_ptr<NatsConnection> connection_;
  // A connection on each NATS server, for partitions' logs to publish to their stream's
  // leader (ClusterPersistenceOptions::leaders); outlives persistence_.
  std::unique_ptr<LeaderConnections> leaders_;
  std::unique_ptr<ClusterPersistence> persistence_;
  std::unique_ptr<Routing> routing_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<Coordinator> coordinator_;
  // The coordinator, for the heartbeats' thread (Describe), which runs before it is made.
  std::atomic<Coordinator*> heartbeat_coordinator_{nullptr};
  std::unique_ptr<ChangeFeed> feed_;
  bool catalog_restored_ = false;  // RestoreCatalog replaced the catalog
  std::string node_name_;
  std::string redis_address_;
  std::string http_address_;
};

}  // namespace tally::cluster
