// Coordinator: the policy of a cluster node's partitions — when to claim, when a loss is
// finished, what the servers' routing says. The mechanisms are ClusterPersistence's (claims,
// fences, losses) and Membership's (who is alive); safety is the streams' (a claim lands only
// right after the tail its claimer read; a stale owner's next record is refused).
//
// Two threads, so that what clients see never waits for NATS:
//
// The router, every tick_ms, reads the partitions' states (no NATS call) and sets the
// routes and the topology for the servers (routing.h): served here, MOVED to the owner,
// TRYAGAIN while it changes hands (the owner silent past the lease, a claim or a loss in
// progress), reads only while an owned partition's stream has no quorum, nothing once the
// owner's read lease is over (routing.h: its stream silent for long enough that another node
// may own the partition). It also keeps the liveness watch: when this node last saw each
// owner's record count grow (its monotonic clock), and heartbeats when the owned partitions
// change.
//
// The actor, every tick_ms, does what may wait for NATS (each call bounded by the
// connection's request timeout):
//   1. Losses. A partition fenced (kLost) gets the route kTryAgain; then `close_clients`
//      closes every client whose replies might depend on a write not yet durable (on every
//      thread that serves clients); then ClusterPersistence::FinishLoss. Only then may a Sync
//      return, so no reply that counted a lost write ever leaves.
//   2. Stalls. While an owned partition's stream has had no quorum for lease_ms, new writes
//      are refused (the router's reads-only route) and the clients already waiting are
//      closed, once a lease: their writes may still land or not (an unknown outcome), and
//      they are not left hanging for as long as the NATS servers are down.
//   3. Claims in progress move on, and followers that could not start are started
//      (ClusterPersistence::Step).
//   4. Balance. Once nothing has changed hands for two leases, a node that owns more than its
//      share (more than ceil(P / live nodes), or more than floor while another has less)
//      hands one partition over: its route becomes TRYAGAIN, every worker folds its
//      increments (`barrier`: no request that saw the old route is left outside the
//      keyspace), everything written is made durable (ClusterPersistence::FinishRelease),
//      and the node follows the partition and says in its heartbeats that it released it;
//      the least loaded node claims it at once. One partition a time, two leases apart.
//      A draining node (Routing::RequestDrain, CLUSTER.DRAIN; its heartbeats say so) hands
//      over every partition it owns this way, whatever the shares, and nobody hands one to
//      it; the shares count only the members that are not draining.
//   5. Claims. A partition needs an owner when it never had one, when its owner's stream
//      has been silent for lease_ms, or when its owner says in its heartbeat that it leaves.
//      Placement (placement.h) orders the live members that are not draining (all of them
//      when every one is); the one ranked r claims once the need is older than lease_ms
//      (settle_ms for a partition never claimed, 0 for one its owner released) plus
//      r * claim_step_ms. Silence is timed by the router's watch, and
//      only while the watch has seen the owner's latest record: a record the actor reads
//      before the router times it means the owner is alive.
//
// Threads: Start, Stop and Wake from any thread; the callbacks run on the actor's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster_persistence.h"
#include "cluster/membership.h"
#include "cluster/routing.h"

namespace tally::cluster {

struct CoordinatorOptions {
  std::string cluster_name;
  int64_t lease_ms = 2000;      // an owner silent this long is replaced
  int64_t claim_step_ms = 500;  // how much longer each rank waits before claiming
  int64_t settle_ms = 1500;     // after the start, before claiming a partition never claimed
  int64_t tick_ms = 50;
};

class Coordinator {
 public:
  // Closes every client whose replies might depend on a write not yet durable, and returns
  // once done. On the coordinator's thread.
  using CloseClients = std::function<void()>;
  // Returns once every thread serving clients has applied what it took so far (the
  // increments buffered in an event-loop turn folded into the keyspace). On the
  // coordinator's thread.
  using Barrier = std::function<void()>;

  // REQUIRES: everything referenced outlives the coordinator; persistence loaded.
  Coordinator(ClusterPersistence& persistence, Membership& membership, Routing& routing,
              NatsConnection& connection, CoordinatorOptions options, CloseClients close_clients,
              Barrier barrier);
  ~Coordinator();  // Stop()s.
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  void Start();
  // Stops the thread; the routes stay as they were. Idempotent.
  void Stop();
  // Something changed (a fence): tick now.
  void Wake();
  // Where the topology's change stream figures come from (the node's change feed); unset:
  // zeros. Before Start.
  void SetChangeStats(std::function<ChangeStreamStats()> stats);

  // The partitions this node owns now, and those it released lately (for its heartbeats).
  std::vector<uint32_t> Owned() const;
  std::vector<uint32_t> Releasing() const;
  uint64_t releases() const;
  uint64_t claims_started() const;
  uint64_t losses() const;
  // Times waiting clients were closed for a stream without quorum.
  uint64_t stall_closes() const;

 private:
  using Clock = std::chrono::steady_clock;

  // What the coordinator remembers of a partition between ticks.
  struct Watch {
    uint64_t term = 0;
    uint64_t last_record_seq = 0;
    Clock::time_point heard;  // when term or last_record_seq last changed (or the start)
  };

  // The two threads' loops, and one turn of each.
  void RunRouter();
  void RunActor();
  void RouteTurn();
  void ActTurn();
  // Waits for the next turn of a loop (the actor's also comes at once after Wake()); false
  // once stopping.
  bool WaitTurn(bool actor);
  std::vector<PartitionStatus> Statuses() const;
  void FinishLosses(const std::vector<PartitionStatus>& statuses);
  void CloseWhileStalled(const std::vector<PartitionStatus>& statuses);
  void ClaimWhereNeeded(const std::vector<PartitionStatus>& statuses,
                        const std::vector<Member>& live);
  void Rebalance(const std::vector<PartitionStatus>& statuses, const std::vector<Member>& live);
  // The partition of this node to hand to the least loaded member, if this node owns more
  // than its share.
  std::optional<uint32_t> PartitionToRelease(const std::vector<PartitionStatus>& statuses,
                                             const std::vector<Member>& live) const;
  void Publish(const std::vector<PartitionStatus>& statuses, const std::vector<Member>& live);
  // Whether `member` drains: this node's drain request (Routing::drain_requested), another's
  // heartbeat.
  bool Draining(const Member& member) const;
  // How long after the first send of its newest durable record an owned partition is served
  // (routing.h). Another node claims at least lease_ms after it saw that record, which was
  // after the send: the quarter left is the margin for the clocks of two machines and for
  // a route set at most a tick ago.
  std::chrono::milliseconds ReadLease() const {
    return std::chrono::milliseconds(options_.lease_ms * 3 / 4);
  }
  // Whether partition p's owner is presumed gone, and since when its need for an owner runs.
  bool NeedsOwner(uint32_t p, const PartitionStatus& status, Clock::time_point now,
                  Clock::time_point* since, int64_t* wait_ms) const;

  ClusterPersistence& persistence_;
  Membership& membership_;
  Routing& routing_;
  NatsConnection& connection_;
  const CoordinatorOptions options_;
  std::function<ChangeStreamStats()> change_stats_;  // set before Start
  const CloseClients close_clients_;
  const Barrier barrier_;
  const Clock::time_point started_;

  // The router's only:
  uint64_t topology_epoch_ = 0;
  // The actor's only:
  Clock::time_point last_stall_close_;
  Clock::time_point last_release_;

  // Held while a route is set: the router re-reads a partition's role under it before it
  // serves the partition, and the actor stops serving a lost partition under it before it
  // closes the waiting clients. Before the persistence's own lock.
  std::mutex route_mutex_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Guarded by mutex_:
  std::vector<Watch> watches_;  // index = partition; written by the router
  // Since when each owned partition's stream has had no quorum (router), and how often the
  // actor closed waiting clients for it.
  std::vector<std::optional<Clock::time_point>> stalled_since_;
  bool woken_ = false;
  bool stopping_ = false;
  std::vector<uint32_t> owned_;
  // Released partitions, and the claim term in force when each was released: listed in the
  // heartbeats until a newer claim is seen.
  std::vector<std::pair<uint32_t, uint64_t>> released_;
  Clock::time_point last_owner_change_;  // when the router last saw an owner change
  uint64_t releases_ = 0;
  uint64_t claims_started_ = 0;
  uint64_t losses_ = 0;
  uint64_t stall_closes_ = 0;

  std::thread router_;
  std::thread actor_;
};

}  // namespace tally::cluster
