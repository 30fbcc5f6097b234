// Coordinator: the policy of a cluster node's partitions — when to claim, when a loss is
// finished, what the servers' routing says. The mechanisms are ClusterPersistence's (claims,
// fences, losses) and Membership's (who is alive); safety is the streams' (a claim lands only
// right after the tail its claimer read; a stale owner's next record is refused).
//
// Every tick (tick_ms), on a thread of its own:
//   1. Losses. A partition fenced (kLost) gets the route kTryAgain; then `close_clients`
//      closes every client whose replies might depend on a write not yet durable (on every
//      thread that serves clients); then ClusterPersistence::FinishLoss. Only then may a Sync
//      return, so no reply that counted a lost write ever leaves.
//   2. Claims in progress move on (ClusterPersistence::Step).
//   3. Liveness. A partition needs an owner when it never had one, when its owner's stream
//      has been silent for lease_ms (this node's monotonic clock, from when it last saw the
//      owner's record count grow), or when its owner says in its heartbeat that it leaves.
//   4. Claims. For the partitions that need an owner, placement (placement.h) orders the live
//      members; the one ranked r claims once the need is older than lease_ms (settle_ms for a
//      partition never claimed, 0 for one its owner released) plus r * claim_step_ms.
//   5. Routes and topology for the servers (routing.h), and a heartbeat when this node's
//      owned partitions changed.
//
// Threads: Start, Stop and Wake from any thread; the callbacks run on the coordinator's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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

  // REQUIRES: everything referenced outlives the coordinator; persistence loaded.
  Coordinator(ClusterPersistence& persistence, Membership& membership, Routing& routing,
              NatsConnection& connection, CoordinatorOptions options, CloseClients close_clients);
  ~Coordinator();  // Stop()s.
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  void Start();
  // Stops the thread; the routes stay as they were. Idempotent.
  void Stop();
  // Something changed (a fence): tick now.
  void Wake();

  // The partitions this node owns now (for its heartbeats).
  std::vector<uint32_t> Owned() const;
  uint64_t claims_started() const;
  uint64_t losses() const;

 private:
  using Clock = std::chrono::steady_clock;

  // What the coordinator remembers of a partition between ticks.
  struct Watch {
    uint64_t term = 0;
    uint64_t last_record_seq = 0;
    Clock::time_point heard;  // when term or last_record_seq last changed (or the start)
  };

  void Run();
  void Tick();
  void FinishLosses(const std::vector<PartitionStatus>& statuses);
  void ClaimWhereNeeded(const std::vector<PartitionStatus>& statuses,
                        const std::vector<Member>& live);
  void Publish(const std::vector<PartitionStatus>& statuses, const std::vector<Member>& live);
  // Whether partition p's owner is presumed gone, and since when its need for an owner runs.
  bool NeedsOwner(uint32_t p, const PartitionStatus& status, Clock::time_point now,
                  Clock::time_point* since, int64_t* wait_ms) const;

  ClusterPersistence& persistence_;
  Membership& membership_;
  Routing& routing_;
  NatsConnection& connection_;
  const CoordinatorOptions options_;
  const CloseClients close_clients_;
  const Clock::time_point started_;

  // The coordinator's thread only:
  std::vector<Watch> watches_;  // index = partition
  uint64_t topology_epoch_ = 0;
  std::vector<std::string> last_owners_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Guarded by mutex_:
  bool woken_ = false;
  bool stopping_ = false;
  std::vector<uint32_t> owned_;
  uint64_t claims_started_ = 0;
  uint64_t losses_ = 0;

  std::thread thread_;
};

}  // namespace tally::cluster
