// ClusterPersistence's snapshots, trimming and restores (the top of cluster_persistence.h
// says what they are for), on the snapshot thread.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "cluster/cluster_persistence.h"
#include "core/slot.h"
#include "core/thread_name.h"
#include "engine/keyspace.h"

namespace tally::cluster {
namespace {

// How long the snapshot thread waits before trying a failed restore again.
constexpr std::chrono::seconds kRetryAfter(1);
// Partitions restored at once: one per two cores, at most 4. A restore is CPU-bound once
// its chunks stream from JetStream (one alone: 625,000 counters in 0.15-0.3 s on this
// machine), and its chunks' keys fall in every stripe of the keyspace. Whether several at
// once would do better on 2 cores now is not measured (before restores dropped their
// partitions in one walk, 4 at once beat 1: 10.9 s against 12.5 s for 16 partitions).
size_t RestoreThreads() {
  return std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 4);
}
// Attempts at reading a partition's newest snapshot when a newer one replaces it meanwhile.
constexpr int kReadAttempts = 3;

}  // namespace

void ClusterPersistence::SetTrimFloor(std::function<uint64_t(uint32_t partition)> floor) {
  std::lock_guard lock(mutex_);
  trim_floor_ = std::move(floor);
}

std::vector<uint64_t> ClusterPersistence::Checkpointed() const {
  std::lock_guard lock(mutex_);
  std::vector<uint64_t> saved;
  saved.reserve(partitions_.size());
  for (const Partition& partition : partitions_) saved.push_back(partition.checkpointed);
  return saved;
}

SnapshotStats ClusterPersistence::snapshot_stats() const {
  std::lock_guard lock(mutex_);
  return snapshot_stats_;
}

void ClusterPersistence::WantRestoreLocked(Partition& partition) {
  partition.role = PartitionRole::kFollowing;
  partition.follower_wanted = false;
  partition.restore_wanted = true;
  snapshot_wake_.notify_all();
}

void ClusterPersistence::RunSnapshots() {
  std::unique_lock lock(mutex_);
  while (!snapshot_stop_) {
    std::vector<uint32_t> to_restore;
    for (uint32_t p = 0; p < partitions_.size(); ++p) {
      Partition& partition = partitions_[p];
      if (partition.restore_wanted && partition.role == PartitionRole::kFollowing &&
          !partition.follower && !closed_) {
        partition.restore_wanted = false;
        partition.restoring = true;
        to_restore.push_back(p);
      }
    }
    if (!to_restore.empty()) {
      lock.unlock();
      const bool all = RestoreAll(to_restore);
      lock.lock();
      // Not now (no snapshot yet, NATS trouble): again after a while, not in a tight loop.
      if (!all) snapshot_wake_.wait_for(lock, kRetryAfter, [&] { return snapshot_stop_; });
      continue;
    }
    if (snapshot_view_) {
      const std::shared_ptr<const storage::ClusterTablesView> view = std::move(snapshot_view_);
      const std::vector<uint32_t> owned = std::move(snapshot_partitions_);
      snapshot_view_.reset();
      lock.unlock();
      for (uint32_t p : owned) SnapshotAndTrim(*view, p);
      lock.lock();
      continue;
    }
    snapshot_wake_.wait(lock);
  }
}

bool ClusterPersistence::RestoreAll(const std::vector<uint32_t>& partitions) {
  // What this node holds of them goes first, in one walk of the keyspace: one walk per
  // partition grew with every partition restored (a node restoring 16 partitions of 10M
  // counters spent most of its time there).
  DropPartitions(partitions);
  // As many at once as the cores allow (RestoreThreads; a new node restores every
  // partition).
  std::atomic<size_t> next{0};
  std::atomic<bool> all{true};
  const auto work = [&] {
    for (size_t i = next++; i < partitions.size(); i = next++) {
      if (!Restore(partitions[i])) all = false;
    }
  };
  std::vector<std::thread> helpers;
  const size_t threads = std::min(RestoreThreads(), partitions.size());
  for (size_t t = 1; t < threads; ++t) helpers.push_back(NamedThread("restore", work));
  work();
  for (std::thread& helper : helpers) helper.join();
  return all;
}

void ClusterPersistence::SnapshotAndTrim(const storage::ClusterTablesView& view,
                                         uint32_t partition) {
  const auto failed = [&](const Error& error, std::string_view what) {
    spdlog::warn("partition {}: {}: {}", partition, what, error.message);
    std::lock_guard lock(mutex_);
    ++snapshot_stats_.failures;
  };
  auto saved = view.Position(partition);
  if (!saved) return failed(saved.error(), "cannot read its saved position");
  uint64_t snapshot_seq;
  bool known;
  {
    std::lock_guard lock(mutex_);
    snapshot_seq = partitions_[partition].snapshot_seq;
    known = partitions_[partition].snapshot_known;
  }
  if (!known) {
    // After a start: the newest snapshot an earlier owner (or this node) wrote.
    auto latest = snapshots_->Latest(partition);
    if (!latest) return failed(latest.error(), "cannot read its newest snapshot");
    if (*latest) snapshot_seq = std::max(snapshot_seq, (*latest)->position.seq);
    std::lock_guard lock(mutex_);
    partitions_[partition].snapshot_seq = snapshot_seq;
    partitions_[partition].snapshot_known = true;
  }
  if (saved->seq > snapshot_seq && (saved->seq >= snapshot_seq + options_.snapshot_every_records ||
                                    !SnapshotUsable(partition, snapshot_seq))) {
    const auto began = std::chrono::steady_clock::now();
    auto written = snapshots_->Write(view, partition);
    if (!written) return failed(written.error(), "cannot write a snapshot");
    spdlog::info("partition {}: snapshot at sequence {}: {} counters in {} chunks, {} ms",
                 partition, written->position.seq, written->counters, written->chunks,
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - began)
                     .count());
    snapshot_seq = written->position.seq;
    std::lock_guard lock(mutex_);
    partitions_[partition].snapshot_seq =
        std::max(partitions_[partition].snapshot_seq, snapshot_seq);
    ++snapshot_stats_.written;
  }
  if (snapshot_seq == 0) return;
  // Keep what a live node's restart reads, and what follows the snapshot.
  uint64_t floor;
  std::function<uint64_t(uint32_t)> trim_floor;
  uint64_t trimmed;
  {
    std::lock_guard lock(mutex_);
    floor = partitions_[partition].checkpointed;
    trim_floor = trim_floor_;
    trimmed = partitions_[partition].trimmed_below;
  }
  if (trim_floor) floor = std::min(floor, trim_floor(partition));
  const uint64_t below = std::min(floor, snapshot_seq) + 1;
  if (below <= std::max<uint64_t>(trimmed, 1)) return;
  if (auto purged = connection_.PurgeStream(PartitionStream(options_, partition), below); !purged) {
    return failed(purged.error().ToError(), "cannot trim its stream");
  }
  spdlog::info("partition {}: stream trimmed below sequence {}", partition, below);
  std::lock_guard lock(mutex_);
  partitions_[partition].trimmed_below = below;
  ++snapshot_stats_.trims;
}

bool ClusterPersistence::SnapshotUsable(uint32_t partition, uint64_t snapshot_seq) {
  // Our trims stop at the newest snapshot, and its chunks go only once a newer manifest is
  // in; yet nats-server 2.9.10 was seen to drop more of a stream's front after its servers
  // were killed again and again (every replica agreeing on the new first sequence). Whoever
  // must restore the partition then needs a newer snapshot. Answers that cannot be had now
  // (NATS trouble, a stream without a leader) count as usable: asked again next time.
  auto state = connection_.GetStreamState(PartitionStream(options_, partition));
  if (state && !state->leaderless && state->messages > 0 && state->first_seq > snapshot_seq + 1) {
    spdlog::warn(
        "partition {}: its stream begins at {}, past its newest snapshot (sequence {}): a new "
        "snapshot",
        partition, state->first_seq, snapshot_seq);
    return false;
  }
  if (snapshot_seq == 0) return true;
  auto latest = snapshots_->Latest(partition);
  if (!latest || !*latest) return true;
  auto whole = snapshots_->Whole(**latest);
  if (!whole || *whole) return true;
  spdlog::warn("partition {}: its newest snapshot (sequence {}) lost its chunks: a new snapshot",
               partition, (*latest)->position.seq);
  return false;
}

void ClusterPersistence::DropPartitions(std::span<const uint32_t> partitions) {
  std::vector<SlotRange> ranges;
  std::function<void(SlotRange)> forgotten;
  {
    std::lock_guard lock(mutex_);
    for (uint32_t p : partitions) {
      const Partition& partition = partitions_[p];
      if (!closed_ && partition.role == PartitionRole::kFollowing && !partition.follower) {
        ranges.push_back(PartitionSlots(p, options_.partition_count));
      }
    }
    forgotten = on_forgotten_;
  }
  keyspace_->DropSlots(ranges);
  if (forgotten) {
    for (SlotRange range : ranges) forgotten(range);
  }
}

bool ClusterPersistence::Restore(uint32_t partition) {
  for (int attempt = 1;; ++attempt) {
    // Dropped by RestoreAll for the first attempt; again for another, whose chunks may
    // lack counters the first one's had.
    if (attempt > 1) DropPartitions(std::span(&partition, 1));
    Status restored = RestoreFromLatest(partition);
    if (restored) return true;
    // An owner snapshotting meanwhile purges the older snapshot's chunks: read the newer
    // one at once rather than after the retry's wait (what the first one applied is
    // dropped again).
    if (restored.error().code == ErrorCode::kNotFound && attempt < kReadAttempts) {
      spdlog::info("partition {}: {}; restoring from the newer one", partition,
                   restored.error().message);
      continue;
    }
    spdlog::warn("partition {}: cannot restore it from a snapshot yet: {}", partition,
                 restored.error().message);
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    p.restoring = false;
    if (p.role == PartitionRole::kFollowing && !p.follower) p.restore_wanted = true;
    ++snapshot_stats_.failures;
    return false;
  }
}

Status ClusterPersistence::RestoreFromLatest(uint32_t partition) {
  const std::string stream = PartitionStream(options_, partition);
  auto latest = snapshots_->Latest(partition);
  if (!latest) return tl::unexpected(latest.error());
  if (!*latest) {
    return MakeError(ErrorCode::kUnavailable, "its stream was trimmed and no snapshot is found");
  }
  const SnapshotManifest manifest = **latest;
  // The stream must still hold every record after the snapshot (a newer one is on its way
  // otherwise).
  auto state = connection_.GetStreamState(stream);
  if (!state) return tl::unexpected(state.error().ToError());
  if (state->first_seq > manifest.position.seq + 1 && state->messages > 0) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("the newest snapshot is at sequence {}, its stream begins at {}",
                                 manifest.position.seq, state->first_seq));
  }
  spdlog::info("partition {}: restoring from the snapshot at sequence {} ({} counters, {} chunks)",
               partition, manifest.position.seq, manifest.counters, manifest.chunks);
  const auto began = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    if (closed_ || p.role != PartitionRole::kFollowing || p.follower) {
      return MakeError(ErrorCode::kUnavailable, "it changed");
    }
    p.restore_counters = manifest.counters;
    p.restored_counters = 0;
  }
  // Dropped from the keyspace already (DropPartitions); from the tables too, as in
  // FinishLoss. A checkpoint under way may have read some of it: it rebuilds the partition
  // when it finishes.
  if (auto rebuilt = tables_->RebuildPartition(partition); !rebuilt) return rebuilt;
  {
    std::lock_guard lock(mutex_);
    if (checkpoint_open_) lost_in_checkpoint_.push_back(partition);
  }
  // Each chunk applied as it arrives, through the followers' path: the keyspace's stripes
  // are held a chunk at a time, not for the whole partition, and nothing is buffered. The
  // position moves with the last one; until then a checkpoint saves the old one (whatever
  // it saves of the values, a restart from there restores again), and a restore cut short
  // is started again from the drop.
  uint64_t applied = 0;
  Status read = snapshots_->Read(manifest, [&](engine::CommitBatch& batch) {
    // The first chunk's clear: the partition is empty here already.
    batch.CancelClearAll();
    const engine::CommitBatch* chunk = &batch;
    const bool last = ++applied == manifest.chunks;
    applier_->Apply(partition, std::span(&chunk, 1), [&] {
      std::lock_guard lock(mutex_);
      partitions_[partition].restored_counters += batch.put_count();
      if (last) partitions_[partition].from = manifest.position;
    });
    std::lock_guard lock(mutex_);
    return snapshot_stop_ ? MakeError(ErrorCode::kUnavailable, "stopping") : OkStatus();
  });
  if (!read) return read;
  {
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    p.restoring = false;
    p.follower_wanted = true;
    p.snapshot_seq = std::max(p.snapshot_seq, manifest.position.seq);
    ++snapshot_stats_.restores;
  }
  spdlog::info("partition {}: restored {} counters in {} ms; following its stream from {}",
               partition, manifest.counters,
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - began)
                   .count(),
               manifest.position.seq + 1);
  NotifyChange();
  return OkStatus();
}

}  // namespace tally::cluster
