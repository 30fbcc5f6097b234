// Routing: what a cluster node's servers need to know of the cluster, kept by the
// coordinator (coordinator.h) and read by every request. No NATS, no engine: the servers
// link this alone (tally_cluster_routing).
//
// Two parts. The route of each partition — serve here, send to its owner (MOVED), ask to
// try again (TRYAGAIN: the partition changes hands), or refuse (CLUSTERDOWN) — is one atomic
// per partition, read on every keyed request. The topology — nodes, partitions, owners,
// standbys, positions — is an immutable snapshot replaced whole, read by the cluster commands
// (CLUSTER SLOTS, NODES, SHARDS, INFO), INFO cluster and GET /v1/cluster.
//
// One request goes the other way: a drain (CLUSTER.DRAIN), which the servers set here and the
// coordinator reads on its next turn.
//
// The ordering the coordinator relies on: before it closes the clients that may wait for a
// lost partition, it stores that partition's route as kTryAgain; a request that reads the
// route afterwards (on any thread) no longer writes there.
//
// The read lease. A partition is served here only until its `serve_until`, checked at every
// request against this process's steady clock: the coordinator sets it to shortly after the
// first send of the owner's newest durable record. Another node claims the partition only
// once it has seen no new record of the owner for a whole lease, so an owner cut off from
// its stream (its NATS servers lost, or the process frozen) stops answering reads before a
// new owner can acknowledge a write that its values lack. Without it, such an owner served
// its stale values for as long as it did not notice it was fenced (22 s once, in a test).
//
// Threads: everything is safe from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/slot.h"

namespace tally::cluster {

enum class Route : uint8_t {
  kServe,        // this node owns the partition
  kServeReads,   // owned, but its stream does not answer (no quorum): reads served, writes refused
  kMoved,        // another node owns it: MOVED to the topology's owner address
  kTryAgain,     // changing hands (claiming, lost, owner silent): retry shortly
  kDown,         // not served (no owner yet, or the partition failed here)
  kUnconfirmed,  // owned, but past its read lease: another node may own it by now, so
                 // nothing is served
};

// A node as the topology lists it.
struct TopologyNode {
  std::string node_id;  // 40 hex
  std::string name;
  std::string redis_address;  // host:port
  std::string http_address;
  bool self = false;
  bool live = false;
  std::vector<uint32_t> owned;  // partitions it owns, as its heartbeats say (self: as it is)
  bool draining = false;        // handing its partitions over (a drain), claiming none
};

// A partition as this node sees it.
struct TopologyPartition {
  SlotRange slots{0, 0};
  std::string role;  // this node's role: PartitionRoleName
  Route route = Route::kDown;
  std::string owner_id;  // the node of the latest claim (empty: never claimed)
  std::string owner_name;
  std::string owner_address;    // its Redis host:port (what MOVED names)
  uint64_t term = 0;            // the latest claim's sequence
  uint64_t applied_seq = 0;     // what this node applied (following) or has durable (owned)
  uint64_t owner_seq = 0;       // the owner's latest record this node saw
  int64_t owner_silent_ms = 0;  // since this node last saw the owner write (0 when owned here)
  std::string detail;           // why it is not served, when it is not
  // Owned here: the NATS server its records are published to when that is its stream's
  // leader (LeaderConnections); empty: through the node's own connection.
  std::string log_server;
  uint64_t snapshot_seq = 0;   // the newest snapshot this node wrote or restored from
  uint64_t trimmed_below = 0;  // this node trimmed the stream below this sequence
  bool restoring = false;      // being restored from a snapshot: so many counters of so many
  uint64_t restored_counters = 0;
  uint64_t restore_counters = 0;
};

// The cluster's change stream as this node reads it (change_feed.h).
struct ChangeStreamStats {
  uint64_t read = 0;              // the last message read
  uint64_t catalog = 0;           // how far every catalog message has run
  uint64_t floor = 0;             // what this node would read from (its heartbeats say it)
  uint64_t trims = 0;             // trims this node made (as partition 0's owner)
  uint64_t trimmed_below = 0;     // the last one's floor
  bool catalog_restored = false;  // this node's catalog came from a catalog snapshot at start
};

// Everything the cluster commands show.
struct Topology {
  std::string self_id;
  std::string cluster_name;
  uint32_t partition_count = 0;
  std::vector<TopologyNode> nodes;            // ordered by node id
  std::vector<TopologyPartition> partitions;  // index = partition
  bool nats_connected = false;
  std::string nats_url;
  uint64_t nats_reconnects = 0;
  uint64_t epoch = 0;  // grows with every change of owners (CLUSTER INFO's current_epoch)
  // Snapshots and trimming on this node since it started (cluster_persistence.h).
  uint64_t snapshots_written = 0;
  uint64_t snapshot_restores = 0;
  uint64_t stream_trims = 0;
  uint64_t snapshot_failures = 0;
  ChangeStreamStats changes;

  // The node of `node_id`, or nullptr.
  const TopologyNode* Node(std::string_view node_id) const;
  // The addresses of the live nodes other than the owner of partition p: its standbys.
  std::vector<const TopologyNode*> Standbys(uint32_t partition) const;
};

// The name of the change feed's position record of `partition` ("{<tag>}changes", stored as
// "\0pos:{<tag>}changes": change_feed.h): how far the partition's owner applied the
// cluster's change stream. It is no counter: a flush of the partition keeps it (the pushes
// applied stay applied). REQUIRES as PartitionSlots.
std::string ChangePositionName(uint32_t partition, uint32_t partition_count);
// The name of partition p's source fence records (derived::PartitionShare::fence_name):
// "{<tag>}source".
std::string SourceFenceName(uint32_t partition, uint32_t partition_count);

class Routing {
 public:
  explicit Routing(uint32_t partition_count);
  Routing(const Routing&) = delete;
  Routing& operator=(const Routing&) = delete;

  uint32_t partition_count() const { return partition_count_; }
  uint32_t PartitionOf(uint32_t slot) const { return SlotPartition(slot, partition_count_); }

  // The route of a partition (the hot path: one atomic load; for a partition served here,
  // a second and a read of the steady clock): kUnconfirmed past its read lease.
  Route route(uint32_t partition) const {
    const Route route = routes_[partition].load(std::memory_order_acquire);
    if (route != Route::kServe && route != Route::kServeReads) return route;
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    return now < serve_until_[partition].load(std::memory_order_acquire) ? route
                                                                         : Route::kUnconfirmed;
  }
  // The coordinator's. `serve_until` matters for kServe and kServeReads: the end of the read
  // lease (see the top of this file).
  void SetRoute(uint32_t partition, Route route,
                std::chrono::steady_clock::time_point serve_until = {}) {
    serve_until_[partition].store(serve_until.time_since_epoch().count(),
                                  std::memory_order_release);
    routes_[partition].store(route, std::memory_order_release);
  }

  std::shared_ptr<const Topology> topology() const;
  // The coordinator's: replaces the snapshot (the routes are set apart, with SetRoute).
  void SetTopology(std::shared_ptr<const Topology> topology);

  // Whether this node is asked to drain: hand every partition it owns over to the other
  // nodes, one at a time, and claim none (until the request is taken back or the node
  // restarts). Set by the servers (CLUSTER.DRAIN), read by the coordinator.
  void RequestDrain(bool drain) { drain_.store(drain, std::memory_order_release); }
  bool drain_requested() const { return drain_.load(std::memory_order_acquire); }

 private:
  const uint32_t partition_count_;
  std::atomic<bool> drain_{false};
  std::unique_ptr<std::atomic<Route>[]> routes_;
  std::unique_ptr<std::atomic<int64_t>[]> serve_until_;  // steady clock ticks
  mutable std::mutex mutex_;
  std::shared_ptr<const Topology> topology_;  // guarded by mutex_
};

}  // namespace tally::cluster
