// ClusterPersistence: how a partition changes hands on this node — a claim (catching up,
// then claiming), a loss, a hand-over — and what the change feed holds while it applies a
// push. The write path, loading and checkpoints are in cluster_persistence.cc.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "cluster/cluster_persistence.h"
#include "core/slot.h"
#include "engine/keyspace.h"

namespace tally::cluster {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

Status ClusterPersistence::BeginClaim(uint32_t partition, const PartitionOwner& seen) {
  {
    std::lock_guard lock(mutex_);
    const Partition& p = partitions_[partition];
    if (p.role != PartitionRole::kFollowing || !p.follower) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("partition {} is {}, not followed",
                                                            partition, PartitionRoleName(p.role)));
    }
  }
  auto state = connection_.GetStreamState(PartitionStream(options_, partition));
  if (!state) return tl::unexpected(state.error().ToError());
  if (state->leaderless) {
    // Answered by one replica, which may be behind: its tail is no tail to claim after.
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("partition {}: its stream has no leader now", partition));
  }
  std::lock_guard lock(mutex_);
  Partition& p = partitions_[partition];
  if (p.role != PartitionRole::kFollowing || !p.follower) {
    return MakeError(ErrorCode::kUnavailable, "the partition changed meanwhile");
  }
  p.role = PartitionRole::kCatchingUp;
  p.claim_tail = state->last_seq;
  p.claim_leader = state->leader;
  p.claim_seen = seen;
  p.claim_deadline = Clock::now() + std::chrono::milliseconds(options_.catch_up_timeout_ms);
  return OkStatus();
}

std::vector<uint32_t> ClusterPersistence::Step() {
  std::vector<uint32_t> changed;
  std::vector<std::unique_ptr<Follower>> stopped;  // destroyed outside mutex_
  // Starting a follower asks JetStream, which may take the connection's request timeout when
  // it cannot answer: one such wait a call, the rest next time.
  const auto began = Clock::now();
  bool waited = false;
  for (uint32_t p = 0; p < options_.partition_count; ++p) {
    PartitionRole role;
    bool start_follower = false;
    bool follower_stopped = false;
    {
      std::lock_guard lock(mutex_);
      if (closed_) return changed;
      Partition& partition = partitions_[p];
      role = partition.role;
      start_follower = role == PartitionRole::kFollowing && partition.follower_wanted;
      follower_stopped =
          (role == PartitionRole::kFollowing || role == PartitionRole::kCatchingUp) &&
          partition.follower && partition.follower->state() == FollowerState::kStopped;
      if (follower_stopped && snapshots_ && partition.follower->lost_records()) {
        // Its stream was trimmed past what this node holds: a snapshot instead.
        // The reason names the partition ("partition 3: stream ... no longer holds ...").
        const Status reason = partition.follower->stop_reason();
        spdlog::info(
            "{}; restoring it from a snapshot",
            reason ? fmt::format("partition {}: its follower stopped", p) : reason.error().message);
        stopped.push_back(std::move(partition.follower));
        WantRestoreLocked(partition);
        changed.push_back(p);
        continue;
      }
      if (follower_stopped) {
        const Status reason = partition.follower->stop_reason();
        partition.failure = reason ? "stopped" : reason.error().message;
        partition.from = partition.follower->position();
        partition.role = PartitionRole::kFailed;
        spdlog::error("partition {}: its follower stopped: {}", p, partition.failure);
      }
    }
    if (follower_stopped) {
      changed.push_back(p);
      continue;
    }
    if (start_follower && !waited) {
      StartFollower(p);
      waited = Clock::now() - began > std::chrono::milliseconds(100);
    }
    if ((role == PartitionRole::kCatchingUp && StepCatchingUp(p)) ||
        (role == PartitionRole::kClaiming && StepClaiming(p))) {
      changed.push_back(p);
    }
  }
  return changed;
}

bool ClusterPersistence::StepCatchingUp(uint32_t partition) {
  std::unique_ptr<Follower> follower;
  // A follower that did not reach the tail in time (stuck, maybe): destroyed outside the
  // lock, when this returns.
  std::unique_ptr<Follower> stale;
  uint64_t tail;
  std::string leader;
  {
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    const FollowerPosition reached = p.follower->position();
    tail = p.claim_tail;
    leader = p.claim_leader;
    const PartitionOwner owner = p.follower->owner();
    if (owner.term != p.claim_seen.term || owner.last_record_seq > p.claim_seen.last_record_seq) {
      spdlog::info("partition {}: its owner wrote meanwhile (term {}, sequence {}); claim given up",
                   partition, owner.term, owner.last_record_seq);
      p.role = PartitionRole::kFollowing;
      return true;
    }
    // Everything up to the tail read: applied, or buffered as a group the tail cuts short
    // (its writer died before its last record, so none of it was acknowledged; the claim
    // ends it for every reader).
    if (reached.seq + p.follower->pending_parts() < tail) {
      if (Clock::now() < p.claim_deadline) return false;
      spdlog::warn(
          "partition {}: read up to {} of {} in time; claim given up, its follower "
          "started again",
          partition, reached.seq, tail);
      p.role = PartitionRole::kFollowing;
      p.from = reached;
      p.last_owner = p.follower->owner();
      stale = std::move(p.follower);
      p.follower_wanted = true;
      return true;
    }
    p.last_owner = owner;
    follower = std::move(p.follower);
  }
  // Stopped outside the lock (its thread may be waiting for the keyspace's stripes); from
  // here on the keyspace holds exactly what it applied.
  follower->Stop();
  const FollowerPosition reached = follower->position();
  follower.reset();

  RecordHeader header;
  header.partition = partition;
  header.term = tail + 1;
  header.writer = NewWriterId();
  header.owner_unix_ms = NowUnixMs();
  std::shared_ptr<PartitionLog> log;
  std::string log_server;  // named when the log is on its stream's leader
  if (reached.seq <= tail) {
    PartitionLogOptions log_options;
    log_options.stream = PartitionStream(options_, partition);
    log_options.subject = PartitionSubject(options_, partition);
    log_options.partition = partition;
    log_options.max_in_flight = options_.max_in_flight;
    log_options.publish_timeout_ms = options_.publish_timeout_ms;
    log_options.max_record_bytes = options_.max_record_bytes;
    const uint64_t writer = header.writer;
    NatsConnection* on_leader = options_.leaders ? options_.leaders->On(leader) : nullptr;
    if (on_leader) log_server = leader;
    auto started =
        PartitionLog::Start(on_leader ? *on_leader : connection_, log_options, tail, writer,
                            [this, partition, writer](const PartitionLogProgress& p) {
                              OnLogProgress(partition, writer, p);
                            });
    if (started) {
      log = std::move(*started);
    } else {
      spdlog::warn("partition {}: cannot start writing: {}", partition, started.error().message);
    }
  }
  std::lock_guard lock(mutex_);
  Partition& p = partitions_[partition];
  p.from = reached;
  if (!log || closed_) {
    // The stream grew past the tail meanwhile (another writer is alive), or NATS failed:
    // follow on.
    if (reached.seq > tail) {
      spdlog::info("partition {}: its stream grew past {} (read up to {}); claim given up",
                   partition, tail, reached.seq);
    }
    p.role = PartitionRole::kFollowing;
    p.follower_wanted = true;
    return true;
  }
  ClaimBody claim = identity_;
  claim.node_id = tables_->node_id();
  claim.caught_up_to = tail;
  claim.previous_term = reached.term;
  std::string bytes;
  EncodeClaim(header, claim, &bytes);
  auto seq = log->Append(RecordKind::kClaim, std::move(bytes));
  if (!seq) {
    spdlog::warn("partition {}: cannot append its claim: {}", partition, seq.error().message);
    p.role = PartitionRole::kFollowing;
    p.follower_wanted = true;
    return true;
  }
  p.role = PartitionRole::kClaiming;
  p.log = std::move(log);
  p.log_server = std::move(log_server);
  p.header = header;
  p.claim = std::move(claim);
  p.claim_seq = *seq;
  return true;
}

bool ClusterPersistence::StepClaiming(uint32_t partition) {
  std::shared_ptr<PartitionLog> fenced;
  std::vector<uint32_t> checkpoint_partitions;
  // The open checkpoint's record is read and written whole under it (BeginCheckpoint).
  std::lock_guard record(checkpoint_record_mutex_);
  {
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    const PartitionLogProgress progress = p.log->progress();
    if (progress.state == PartitionLogState::kFenced) {
      // Another node claimed first: nothing of ours landed.
      spdlog::info("partition {}: another node claimed it first", partition);
      fenced = std::move(p.log);
      p.role = PartitionRole::kFollowing;
      p.follower_wanted = true;
    } else if (progress.durable_seq >= p.claim_seq) {
      p.role = PartitionRole::kOwned;
      p.fenced_at = 0;
      p.committed_seq = p.claim_seq;
      p.last_append = Clock::now();
      p.last_owner.term = p.header.term;
      p.last_owner.claim = p.claim;
      p.last_owner.last_record_seq = p.claim_seq;
      p.last_owner.last_record_unix_ms = p.header.owner_unix_ms;
      spdlog::info("partition {}: claimed at sequence {} (caught up from {})", partition,
                   p.claim_seq, p.from.seq);
      if (checkpoint_open_ &&
          std::find(checkpoint_partitions_.begin(), checkpoint_partitions_.end(), partition) ==
              checkpoint_partitions_.end()) {
        checkpoint_partitions_.push_back(partition);
        checkpoint_partitions = checkpoint_partitions_;
      }
    } else {
      return false;
    }
  }
  fenced.reset();
  if (!checkpoint_partitions.empty()) {
    // The open checkpoint may now write values of this partition that its stream has not
    // got yet: name it in ckpt_open before any client writes (routing follows this call).
    if (auto status = tables_->BeginCheckpoint(checkpoint_partitions); !status) {
      spdlog::error("partition {}: cannot record it in the open checkpoint: {}", partition,
                    status.error().message);
    }
  }
  return true;
}

Status ClusterPersistence::ClaimNow(uint32_t partition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  // The owner the claim replaces is the stream's latest: let the follower read up to the
  // tail first (a restarted node's own renewals may follow its saved position), or the
  // claim would be given up when it reads them.
  // (Followers are replaced only on this thread: the one found stays while it is waited for.)
  if (auto state = connection_.GetStreamState(PartitionStream(options_, partition)); state) {
    if (const Follower* reading = follower(partition)) {
      reading->WaitApplied(state->last_seq,
                           std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::max(deadline - Clock::now(), Clock::duration::zero())));
    }
  }
  // A stream without a leader (just created, or electing one) does not answer: ask again.
  Status begun = BeginClaim(partition, status(partition).owner);
  while (!begun && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Step();
    begun = BeginClaim(partition, status(partition).owner);
  }
  if (!begun) return begun;
  while (Clock::now() < deadline) {
    Step();
    const PartitionRole now = role(partition);
    if (now == PartitionRole::kOwned) return OkStatus();
    if (now == PartitionRole::kFollowing || now == PartitionRole::kFailed) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("partition {}: the claim failed ({})",
                                                            partition, PartitionRoleName(now)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return MakeError(ErrorCode::kUnavailable,
                   fmt::format("partition {}: not claimed in time", partition));
}

void ClusterPersistence::OnLogProgress(uint32_t partition, uint64_t writer,
                                       const PartitionLogProgress& progress) {
  if (progress.state == PartitionLogState::kFenced) MarkLost(partition, writer);
}

std::shared_lock<std::shared_mutex> ClusterPersistence::HoldOwnership() const {
  return std::shared_lock(ownership_mutex_);
}

std::vector<uint32_t> ClusterPersistence::Owned() const {
  std::vector<uint32_t> owned;
  std::lock_guard lock(mutex_);
  for (uint32_t p = 0; p < options_.partition_count; ++p) {
    if (partitions_[p].role == PartitionRole::kOwned) owned.push_back(p);
  }
  return owned;
}

void ClusterPersistence::MarkLost(uint32_t partition, uint64_t writer) {
  {
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    if (!CommitsToStream(p.role) || p.header.writer != writer) return;
    p.role = PartitionRole::kLost;
    spdlog::warn("partition {}: fenced (another node took its stream); stopping writes", partition);
  }
  NotifyChange();
}

Status ClusterPersistence::FinishLoss(uint32_t partition) {
  // No push of the change feed lands in the partition from here on (change_feed.h).
  std::unique_lock ownership(ownership_mutex_);
  {
    std::lock_guard lock(mutex_);
    const Partition& p = partitions_[partition];
    if (p.role != PartitionRole::kLost) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("partition {} is {}, not lost",
                                                            partition, PartitionRoleName(p.role)));
    }
  }
  // What the keyspace holds of the partition may include writes its stream never got: forget
  // it, here and in the tables, and read the stream again from the start. All of it while the
  // partition is still kLost: a checkpoint beginning meanwhile names it in its open record
  // and rebuilds it when it finishes, so that no lost value is ever saved as the stream's.
  const SlotRange slots = PartitionSlots(partition, options_.partition_count);
  keyspace_->DropSlots(slots);
  std::function<void(SlotRange)> forgotten;
  {
    std::lock_guard lock(mutex_);
    forgotten = on_forgotten_;
  }
  if (forgotten) forgotten(slots);
  if (auto status = tables_->RebuildPartition(partition); !status) return status;
  std::shared_ptr<PartitionLog> log;
  {
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    log = std::move(p.log);
    if (const std::optional<FenceInfo> fence = log != nullptr ? log->fence() : std::nullopt) {
      p.fenced_at = fence->seq;
    }
    p.role = PartitionRole::kFollowing;
    p.from = {};
    p.follower_wanted = true;
    if (checkpoint_open_) lost_in_checkpoint_.push_back(partition);
  }
  ownership.unlock();
  changed_.notify_all();
  log.reset();
  StartFollower(partition);
  return OkStatus();
}

Status ClusterPersistence::BeginRelease(uint32_t partition) {
  std::lock_guard lock(mutex_);
  Partition& p = partitions_[partition];
  if (p.role != PartitionRole::kOwned || p.log->progress().state != PartitionLogState::kWriting) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("partition {} is {}, not owned and writing", partition,
                                 PartitionRoleName(p.role)));
  }
  p.role = PartitionRole::kReleasing;
  return OkStatus();
}

void ClusterPersistence::AbortRelease(uint32_t partition) {
  std::lock_guard lock(mutex_);
  Partition& p = partitions_[partition];
  if (p.role == PartitionRole::kReleasing) p.role = PartitionRole::kOwned;
}

Status ClusterPersistence::FinishRelease(uint32_t partition, std::chrono::milliseconds timeout) {
  // No push of the change feed lands in the partition from here on (change_feed.h): one
  // taken before is in the keyspace, and in the epochs waited for below.
  std::unique_lock ownership(ownership_mutex_);
  const auto deadline = Clock::now() + timeout;
  // The writes made before now: those of the epochs before the open one, and of the open
  // one when anything was written in it.
  const uint64_t last_written = keyspace_->LastWrittenEpoch();
  std::shared_ptr<PartitionLog> log;
  uint64_t seq = 0;
  while (true) {
    {
      std::lock_guard lock(mutex_);
      Partition& p = partitions_[partition];
      if (p.role != PartitionRole::kReleasing) {
        return MakeError(
            ErrorCode::kUnavailable,
            fmt::format("partition {} is {} while released", partition, PartitionRoleName(p.role)));
      }
      if (committed_epoch_ >= last_written) {
        log = p.log;
        seq = p.committed_seq;
        break;
      }
    }
    if (Clock::now() >= deadline) {
      return MakeError(
          ErrorCode::kUnavailable,
          fmt::format("partition {}: epoch {} not committed in time", partition, last_written));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const PartitionLogProgress progress =
      log->WaitDurable(seq, std::max(left, std::chrono::milliseconds(1)));
  if (progress.durable_seq < seq) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("partition {}: record {} not durable in time ({})", partition, seq,
                                 PartitionLogStateName(progress.state)));
  }
  {
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    if (p.role != PartitionRole::kReleasing) {
      return MakeError(ErrorCode::kUnavailable, "the partition changed while released");
    }
    // No write reaches the partition now: a record appended after seq would be one that did
    // (the caller keeps the partition, AbortRelease), never one to follow from before it is
    // in the stream.
    if (p.committed_seq != seq) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("partition {}: record {} appended while it was handed over",
                                   partition, p.committed_seq));
    }
    // Everything the keyspace holds of it is in the stream up to seq: follow on from there
    // (later renewals are read again, harmlessly).
    p.from = {seq, p.header.term, p.header.writer};
    p.role = PartitionRole::kFollowing;
    p.follower_wanted = true;
    log = std::move(p.log);
  }
  log.reset();
  spdlog::info("partition {}: released at sequence {}", partition, seq);
  StartFollower(partition);
  return OkStatus();
}

}  // namespace tally::cluster
