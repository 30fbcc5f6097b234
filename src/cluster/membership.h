// Membership: which tally nodes are alive, and what each says of itself — advisory state for
// placement (who claims a partition that needs an owner) and for clients' routing (the
// standbys listed beside an owner). Never used for safety: ownership is decided by the
// partition streams alone (claims fenced by the expected last sequence).
//
// Every node publishes a heartbeat on a plain NATS subject (<cluster>.members) every
// heartbeat_ms, and reads everyone's. A member is live while its last heartbeat is younger
// than timeout_ms, as measured by this node's monotonic clock when the heartbeat arrived.
// A node that stops says so (a last heartbeat with `leaving`), so that the others need not
// wait out the timeout. The heartbeat's bytes: member_codec.h.
//
// Threads: one thread of its own publishes and reads; every accessor may be called from any
// thread. `describe` is called on that thread before each heartbeat.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/member_codec.h"
#include "cluster/nats_client.h"
#include "core/status.h"

namespace tally::cluster {

// A member as this node sees it.
struct Member {
  MemberInfo info;
  std::chrono::steady_clock::time_point last_seen;
  bool self = false;
};

struct MembershipOptions {
  std::string subject;  // e.g. tally.members
  int64_t heartbeat_ms = 500;
  int64_t timeout_ms = 2000;  // a member silent this long is not live
};

class Membership {
 public:
  using Describe = std::function<MemberInfo()>;

  // Subscribes and starts beating. REQUIRES: `connection` outlives it.
  static Result<std::unique_ptr<Membership>> Start(NatsConnection& connection,
                                                   MembershipOptions options, Describe describe);
  // Leave()s and stops.
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Sends a last heartbeat saying this node leaves, and stops beating. Idempotent.
  void Leave();
  // Sends a heartbeat now (ownership changed), without waiting for the next beat. Any thread.
  void BeatSoon();

  // The live members (this node always among them), ordered by node id.
  std::vector<Member> Live() const;
  // Every member heard from since the start, live or not, ordered by node id.
  std::vector<Member> All() const;
  bool IsLive(const std::string& node_id) const;
  // Heartbeats received that did not decode (from something that is not a tally node).
  uint64_t malformed() const;

 private:
  Membership(NatsConnection& connection, MembershipOptions options, Describe describe,
             std::unique_ptr<PlainSubscriber> subscriber);
  void Run();
  void Beat(bool leaving);
  bool LiveLocked(const Member& member, std::chrono::steady_clock::time_point now) const;

  NatsConnection& connection_;
  const MembershipOptions options_;
  const Describe describe_;
  std::unique_ptr<PlainSubscriber> subscriber_;  // the thread's only

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Guarded by mutex_:
  std::map<std::string, Member> members_;  // by node id
  std::string self_id_;
  uint64_t sequence_ = 0;
  uint64_t malformed_ = 0;
  bool beat_soon_ = false;
  bool stopping_ = false;

  std::thread thread_;
};

}  // namespace tally::cluster
