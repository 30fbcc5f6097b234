#include "cluster/coordinator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster/placement.h"
#include "core/thread_name.h"

namespace tally::cluster {
namespace {

bool Contains(const std::vector<uint32_t>& partitions, uint32_t partition) {
  return std::find(partitions.begin(), partitions.end(), partition) != partitions.end();
}

// The member called `node_id` among `members`, or nullptr.
const Member* FindMember(const std::vector<Member>& members, const std::string& node_id) {
  for (const Member& member : members) {
    if (member.info.node_id == node_id) return &member;
  }
  return nullptr;
}

// Roles in which this node counts a partition as its own (placement's balance).
bool HeldHere(PartitionRole role) {
  return role == PartitionRole::kOwned || role == PartitionRole::kClaiming ||
         role == PartitionRole::kCatchingUp;
}

}  // namespace

Coordinator::Coordinator(ClusterPersistence& persistence, Membership& membership, Routing& routing,
                         NatsConnection& connection, CoordinatorOptions options,
                         CloseClients close_clients, Barrier barrier)
    : persistence_(persistence),
      membership_(membership),
      routing_(routing),
      connection_(connection),
      options_(std::move(options)),
      close_clients_(std::move(close_clients)),
      barrier_(std::move(barrier)),
      started_(Clock::now()),
      watches_(persistence.partition_count()),
      stalled_since_(persistence.partition_count()),
      last_owner_change_(started_) {
  for (Watch& watch : watches_) watch.heard = started_;
}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() {
  std::lock_guard lock(mutex_);
  if (router_.joinable()) return;
  stopping_ = false;
  router_ = NamedThread("cluster router", [this] { RunRouter(); });
  actor_ = NamedThread("cluster actor", [this] { RunActor(); });
}

void Coordinator::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (router_.joinable()) router_.join();
  if (actor_.joinable()) actor_.join();
}

void Coordinator::Wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  wake_.notify_all();
}

std::vector<uint32_t> Coordinator::Owned() const {
  std::lock_guard lock(mutex_);
  return owned_;
}

std::vector<uint32_t> Coordinator::Releasing() const {
  std::lock_guard lock(mutex_);
  std::vector<uint32_t> partitions;
  for (const auto& [p, term] : released_) partitions.push_back(p);
  std::sort(partitions.begin(), partitions.end());
  return partitions;
}

uint64_t Coordinator::releases() const {
  std::lock_guard lock(mutex_);
  return releases_;
}

uint64_t Coordinator::claims_started() const {
  std::lock_guard lock(mutex_);
  return claims_started_;
}

uint64_t Coordinator::losses() const {
  std::lock_guard lock(mutex_);
  return losses_;
}

uint64_t Coordinator::stall_closes() const {
  std::lock_guard lock(mutex_);
  return stall_closes_;
}

bool Coordinator::WaitTurn(bool actor) {
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, std::chrono::milliseconds(options_.tick_ms),
                 [&] { return stopping_ || (actor && woken_); });
  if (actor) woken_ = false;
  return !stopping_;
}

void Coordinator::RunRouter() {
  do {
    RouteTurn();
  } while (WaitTurn(/*actor=*/false));
}

void Coordinator::RunActor() {
  do {
    ActTurn();
  } while (WaitTurn(/*actor=*/true));
}

std::vector<PartitionStatus> Coordinator::Statuses() const {
  std::vector<PartitionStatus> statuses(persistence_.partition_count());
  for (uint32_t p = 0; p < statuses.size(); ++p) statuses[p] = persistence_.status(p);
  return statuses;
}

void Coordinator::RouteTurn() {
  const std::vector<PartitionStatus> statuses = Statuses();
  const auto now = Clock::now();
  {
    std::lock_guard lock(mutex_);
    for (uint32_t p = 0; p < statuses.size(); ++p) {
      Watch& watch = watches_[p];
      const PartitionStatus& status = statuses[p];
      if (status.role == PartitionRole::kOwned || status.owner.term != watch.term ||
          status.owner.last_record_seq != watch.last_record_seq) {
        watch.term = status.owner.term;
        watch.last_record_seq = status.owner.last_record_seq;
        watch.heard = now;
      }
      const bool stalled =
          status.role == PartitionRole::kOwned && status.log_state != PartitionLogState::kWriting;
      if (!stalled) {
        stalled_since_[p].reset();
      } else if (!stalled_since_[p]) {
        stalled_since_[p] = now;
      }
    }
  }
  Publish(statuses, membership_.Live());
}

void Coordinator::ActTurn() {
  FinishLosses(Statuses());
  CloseWhileStalled(Statuses());
  persistence_.Step();
  ClaimWhereNeeded(Statuses(), membership_.Live());
  Rebalance(Statuses(), membership_.Live());
}

std::optional<uint32_t> Coordinator::PartitionToRelease(
    const std::vector<PartitionStatus>& statuses, const std::vector<Member>& live) const {
  // Only in a settled cluster: every partition owned by a live node, none changing hands.
  std::vector<uint32_t> mine;
  for (uint32_t p = 0; p < statuses.size(); ++p) {
    const PartitionStatus& status = statuses[p];
    if (status.role == PartitionRole::kOwned) {
      mine.push_back(p);
    } else if (status.role != PartitionRole::kFollowing || status.owner.term == 0 ||
               FindMember(live, status.owner.claim.node_id) == nullptr) {
      return std::nullopt;
    }
  }
  // The least loaded member that takes partitions (not draining): a draining node hands each
  // of its partitions to it, whatever the shares; the others even out among those members.
  const Member* least = nullptr;
  for (const Member& member : live) {
    if (member.self || member.info.redis_address.empty() || Draining(member)) continue;
    if (least == nullptr || member.info.owned.size() < least->info.owned.size() ||
        (member.info.owned.size() == least->info.owned.size() &&
         member.info.node_id < least->info.node_id)) {
      least = &member;
    }
  }
  if (least == nullptr || mine.empty()) return std::nullopt;
  if (!routing_.drain_requested()) {
    const size_t members = static_cast<size_t>(std::count_if(
        live.begin(), live.end(), [this](const Member& member) { return !Draining(member); }));
    const size_t count = statuses.size();
    const size_t floor = count / members;
    const size_t ceil = (count + members - 1) / members;
    const size_t fewest = least->info.owned.size();
    if (!(mine.size() > ceil || (mine.size() > floor && fewest < floor))) return std::nullopt;
    if (fewest + 1 >= mine.size()) return std::nullopt;  // moving one would not even it out
  }
  // The one the least loaded node would rank highest: the same choice on every node.
  return *std::max_element(mine.begin(), mine.end(), [&](uint32_t a, uint32_t b) {
    return RendezvousWeight(least->info.node_id, a) < RendezvousWeight(least->info.node_id, b);
  });
}

void Coordinator::Rebalance(const std::vector<PartitionStatus>& statuses,
                            const std::vector<Member>& live) {
  const auto now = Clock::now();
  const auto settled = std::chrono::milliseconds(2 * options_.lease_ms);
  {
    std::lock_guard lock(mutex_);
    // A released partition is listed until a newer claim is seen.
    std::erase_if(released_, [&](const auto& entry) {
      return statuses[entry.first].owner.term != entry.second;
    });
    if (now - last_owner_change_ < settled) return;
  }
  if (now - last_release_ < settled) return;
  const std::optional<uint32_t> p = PartitionToRelease(statuses, live);
  if (!p) return;
  last_release_ = now;
  if (auto begun = persistence_.BeginRelease(*p); !begun) return;
  {
    std::lock_guard lock(route_mutex_);
    routing_.SetRoute(*p, Route::kTryAgain);
  }
  barrier_();
  if (auto released = persistence_.FinishRelease(*p, std::chrono::milliseconds(options_.lease_ms));
      !released) {
    spdlog::warn("partition {}: not handed over: {}", *p, released.error().message);
    persistence_.AbortRelease(*p);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    released_.emplace_back(*p, statuses[*p].owner.term);
    ++releases_;
  }
  membership_.BeatSoon();
}

void Coordinator::CloseWhileStalled(const std::vector<PartitionStatus>& statuses) {
  const auto now = Clock::now();
  const auto lease = std::chrono::milliseconds(options_.lease_ms);
  bool stalled_long = false;
  {
    std::lock_guard lock(mutex_);
    for (uint32_t p = 0; p < statuses.size(); ++p) {
      if (stalled_since_[p] && now - *stalled_since_[p] >= lease) stalled_long = true;
    }
  }
  if (!stalled_long || now - last_stall_close_ < lease) return;
  last_stall_close_ = now;
  spdlog::warn(
      "cluster: a partition's stream has had no quorum for {} ms: closing the clients "
      "that wait for a commit (new writes are refused)",
      options_.lease_ms);
  close_clients_();
  std::lock_guard lock(mutex_);
  ++stall_closes_;
}

void Coordinator::FinishLosses(const std::vector<PartitionStatus>& statuses) {
  std::vector<uint32_t> lost;
  for (uint32_t p = 0; p < statuses.size(); ++p) {
    if (statuses[p].role == PartitionRole::kLost) lost.push_back(p);
  }
  if (lost.empty()) return;
  // No request may write to them from here on; then every client that may be waiting for
  // one of their writes is closed: its outcome is unknown to it, never acknowledged.
  {
    std::lock_guard lock(route_mutex_);
    for (uint32_t p : lost) routing_.SetRoute(p, Route::kTryAgain);
  }
  close_clients_();
  {
    std::lock_guard lock(mutex_);
    losses_ += lost.size();
  }
  for (uint32_t p : lost) {
    if (auto status = persistence_.FinishLoss(p); !status) {
      spdlog::error("partition {}: finishing its loss failed: {}", p, status.error().message);
    }
  }
}

bool Coordinator::Draining(const Member& member) const {
  return member.self ? routing_.drain_requested() : member.info.draining;
}

bool Coordinator::NeedsOwner(uint32_t p, const PartitionStatus& status, Clock::time_point now,
                             Clock::time_point* since, int64_t* wait_ms) const {
  if (status.role != PartitionRole::kFollowing) return false;
  // Reading the stream again after a loss, this node sees its own old claim as the owner
  // until it reaches the record that fenced it: that owner's silence means nothing (a claim
  // from that view was once begun on a stale tail).
  if (status.behind_fence) return false;
  Watch watch;
  {
    std::lock_guard lock(mutex_);
    watch = watches_[p];
  }
  const std::string& owner = status.owner.claim.node_id;
  if (status.owner.term == 0) {
    *since = started_;
    *wait_ms = options_.settle_ms;
    return true;
  }
  const std::vector<Member> all = membership_.All();
  const Member* member = FindMember(all, owner);
  const bool released = member != nullptr && !member->self &&
                        (member->info.leaving || Contains(member->info.releasing, p));
  if (released) {
    // Its owner let the partition go: nobody writes it.
    *since = watch.heard;
    *wait_ms = 0;
    return true;
  }
  // An ownership of this node before a restart is treated like any other: its stream is
  // silent. The watch is the router's; a status newer than it shows a record the router has not
  // timed yet: the owner is not silent.
  const bool watched =
      watch.term == status.owner.term && watch.last_record_seq == status.owner.last_record_seq;
  if (watched && now - watch.heard >= std::chrono::milliseconds(options_.lease_ms)) {
    *since = watch.heard;
    *wait_ms = options_.lease_ms;
    return true;
  }
  return false;
}

void Coordinator::ClaimWhereNeeded(const std::vector<PartitionStatus>& statuses,
                                   const std::vector<Member>& live) {
  const auto now = Clock::now();
  std::vector<uint32_t> needy;
  std::vector<Clock::time_point> since;
  std::vector<int64_t> wait;
  for (uint32_t p = 0; p < statuses.size(); ++p) {
    Clock::time_point need_since;
    int64_t need_wait = 0;
    if (NeedsOwner(p, statuses[p], now, &need_since, &need_wait)) {
      needy.push_back(p);
      since.push_back(need_since);
      wait.push_back(need_wait);
    }
  }
  if (needy.empty()) return;
  // The candidates: the live members that are not draining (all of them if every one is),
  // but not the owners being replaced (a member that went silent on its stream may still
  // beat for a while).
  const bool all_draining = std::all_of(live.begin(), live.end(),
                                        [this](const Member& member) { return Draining(member); });
  std::vector<PlacementMember> members;
  size_t self = live.size();
  for (const Member& member : live) {
    if (Draining(member) && !all_draining) continue;
    PlacementMember candidate{member.info.node_id, 0};
    if (member.self) {
      self = members.size();
      for (uint32_t p = 0; p < statuses.size(); ++p) {
        if (HeldHere(statuses[p].role)) ++candidate.owned;
      }
    } else {
      candidate.owned = static_cast<uint32_t>(member.info.owned.size());
    }
    members.push_back(std::move(candidate));
  }
  if (self == live.size()) return;  // this node is no candidate (or not live)
  const std::vector<std::vector<size_t>> orders = ClaimOrders(needy, members);
  for (size_t i = 0; i < needy.size(); ++i) {
    const uint32_t p = needy[i];
    size_t rank = 0;
    for (const size_t member : orders[i]) {
      if (member == self) break;
      // A candidate that is the silent owner itself does not count ahead of us.
      if (members[member].node_id != statuses[p].owner.claim.node_id) ++rank;
    }
    const auto due = since[i] + std::chrono::milliseconds(wait[i] + static_cast<int64_t>(rank) *
                                                                        options_.claim_step_ms);
    if (now < due) continue;
    if (auto begun = persistence_.BeginClaim(p, statuses[p].owner); !begun) {
      spdlog::debug("partition {}: cannot claim yet: {}", p, begun.error().message);
      continue;
    }
    const std::string& owner = statuses[p].owner.claim.node_name;
    spdlog::info("partition {}: claiming it ({}, rank {})", p,
                 statuses[p].owner.term == 0 ? "never owned"
                 : wait[i] == 0              ? fmt::format("handed over by {}", owner)
                                             : fmt::format("owner {} silent", owner),
                 rank);
    std::lock_guard lock(mutex_);
    ++claims_started_;
  }
}

void Coordinator::SetChangeStats(std::function<ChangeStreamStats()> stats) {
  change_stats_ = std::move(stats);
}

void Coordinator::Publish(const std::vector<PartitionStatus>& statuses,
                          const std::vector<Member>& live) {
  const auto now = Clock::now();
  const std::string& self_id = persistence_.node_id();
  const std::shared_ptr<const Topology> previous = routing_.topology();
  auto topology = std::make_shared<Topology>();
  topology->self_id = self_id;
  topology->cluster_name = options_.cluster_name;
  topology->partition_count = persistence_.partition_count();
  topology->nats_connected = connection_.connected();
  topology->nats_url = connection_.connected_url();
  topology->nats_reconnects = connection_.reconnects();
  const SnapshotStats snapshots = persistence_.snapshot_stats();
  topology->snapshots_written = snapshots.written;
  topology->snapshot_restores = snapshots.restores;
  topology->stream_trims = snapshots.trims;
  topology->snapshot_failures = snapshots.failures;
  if (change_stats_) topology->changes = change_stats_();

  std::vector<uint32_t> owned;
  bool owners_changed = false;
  for (uint32_t p = 0; p < statuses.size(); ++p) {
    const PartitionStatus& status = statuses[p];
    TopologyPartition partition;
    partition.slots = PartitionSlots(p, persistence_.partition_count());
    partition.role = std::string(PartitionRoleName(status.role));
    partition.owner_id = status.owner.claim.node_id;
    partition.owner_name = status.owner.claim.node_name;
    partition.owner_address = status.owner.claim.redis_address;
    partition.term = status.owner.term;
    partition.applied_seq = status.position.seq;
    partition.owner_seq = status.owner.last_record_seq;
    Clock::time_point heard;
    {
      std::lock_guard lock(mutex_);
      heard = watches_[p].heard;
    }
    const int64_t silent_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - heard).count();
    const bool owner_silent = silent_ms >= options_.lease_ms;
    Route route = Route::kDown;
    // Owned: served until the read lease ends (routing.h), checked again at every request.
    const Clock::time_point serve_until = status.durable_sent_at + ReadLease();
    switch (status.role) {
      case PartitionRole::kOwned:
        owned.push_back(p);
        route =
            status.log_state == PartitionLogState::kWriting ? Route::kServe : Route::kServeReads;
        if (now >= serve_until) {
          route = Route::kUnconfirmed;
          partition.detail = fmt::format(
              "its stream has not confirmed this node's ownership for {} ms: another node may "
              "own it now, nothing is served here",
              std::chrono::duration_cast<std::chrono::milliseconds>(now - status.durable_sent_at)
                  .count());
        } else if (route == Route::kServeReads) {
          partition.detail = "its stream has no quorum: writes refused until it returns";
        }
        break;
      case PartitionRole::kCatchingUp:
      case PartitionRole::kClaiming:
        route = Route::kTryAgain;
        partition.detail = "this node is claiming it";
        break;
      case PartitionRole::kLost:
        route = Route::kTryAgain;
        partition.detail = "another node took it over";
        break;
      case PartitionRole::kReleasing:
        route = Route::kTryAgain;
        partition.detail = "this node hands it over";
        break;
      case PartitionRole::kFollowing:
      case PartitionRole::kFailed:
        if (status.owner.term == 0 || partition.owner_address.empty()) {
          route = Route::kDown;
          partition.detail = "no owner yet";
        } else if (partition.owner_id == self_id || owner_silent) {
          route = Route::kTryAgain;
          partition.detail = "its owner is silent: a standby takes over";
        } else {
          route = Route::kMoved;
        }
        if (status.role == PartitionRole::kFailed) partition.detail = status.failure;
        break;
    }
    if (partition.owner_address.empty()) {
      // No claim read yet (a follower not started, or reading its stream again after a
      // loss): the owner as its heartbeats say, so that CLUSTER SLOTS lists every partition
      // that has one.
      for (const Member& member : live) {
        if (!member.self && Contains(member.info.owned, p)) {
          partition.owner_id = member.info.node_id;
          partition.owner_name = member.info.node_name;
          partition.owner_address = member.info.redis_address;
          if (route == Route::kDown) route = Route::kMoved;
          partition.detail.clear();
          break;
        }
      }
    }
    const TopologyPartition* before =
        p < previous->partitions.size() ? &previous->partitions[p] : nullptr;
    if (partition.owner_address.empty() && before != nullptr && !before->owner_address.empty() &&
        status.role != PartitionRole::kFailed && silent_ms < 4 * options_.lease_ms) {
      // Nor do the heartbeats name one (a claim under way, its claimer's next heartbeat not
      // yet heard): the owner published last stays listed, so that CLUSTER SLOTS does not
      // leave out a partition changing hands (a client drops a slot missing from its last
      // refresh), and requests are asked to try again. Only for a while: a partition whose
      // owner nobody replaced within four leases, or that failed here, is no longer listed.
      partition.owner_id = before->owner_id;
      partition.owner_name = before->owner_name;
      partition.owner_address = before->owner_address;
      if (route == Route::kDown) {
        route = Route::kTryAgain;
        partition.detail = "its owner is not known here now";
      }
    }
    partition.route = route;
    partition.owner_silent_ms = status.role == PartitionRole::kOwned ? 0 : silent_ms;
    partition.snapshot_seq = status.snapshot_seq;
    partition.trimmed_below = status.trimmed_below;
    partition.log_server = status.log_server;
    partition.restoring = status.restoring;
    partition.restored_counters = status.restored_counters;
    partition.restore_counters = status.restore_counters;
    {
      // The statuses may be older than a loss the actor is finishing: serve only what is
      // still owned now, under the lock the actor takes to stop serving a lost partition.
      std::lock_guard lock(route_mutex_);
      if ((route == Route::kServe || route == Route::kServeReads) &&
          persistence_.role(p) != PartitionRole::kOwned) {
        route = Route::kTryAgain;
        partition.route = route;
      }
      routing_.SetRoute(p, route, serve_until);
    }
    if (partition.owner_id != (before != nullptr ? before->owner_id : std::string())) {
      owners_changed = true;
    }
    topology->partitions.push_back(std::move(partition));
  }
  if (owners_changed) {
    ++topology_epoch_;
    std::lock_guard lock(mutex_);
    last_owner_change_ = now;
  }
  topology->epoch = topology_epoch_;

  for (const Member& member : membership_.All()) {
    TopologyNode node;
    node.node_id = member.info.node_id;
    node.name = member.info.node_name;
    node.redis_address = member.info.redis_address;
    node.http_address = member.info.http_address;
    node.self = member.self;
    node.live = FindMember(live, member.info.node_id) != nullptr;
    node.owned = member.self ? owned : member.info.owned;
    node.draining = Draining(member);
    topology->nodes.push_back(std::move(node));
  }
  routing_.SetTopology(std::move(topology));

  bool changed;
  {
    std::lock_guard lock(mutex_);
    changed = owned != owned_;
    owned_ = std::move(owned);
  }
  if (changed) membership_.BeatSoon();
}

}  // namespace tally::cluster
