// ClusterPersistence: the engine's Persistence on a cluster node (issue 13), and the holder of
// the node's partitions. Every partition is, on this node, in one role:
//
//   kFollowing   a Follower applies its stream (this node is a standby, or catching up)
//   kCatchingUp  claiming: the follower reads up to the stream's tail as found
//   kClaiming    claiming: a claim is appended right after that tail, not yet durable
//   kOwned       this node writes it: its commits go to the stream through a PartitionLog
//   kReleasing   handing it over (rebalancing): no new writes reach it (the coordinator's
//                route says TRYAGAIN), what was written before is still appended; once all
//                of it is durable (FinishRelease) this node follows the partition, and says
//                in its heartbeats that it let it go, so that another node claims at once
//   kLost        fenced: another node's claim took the stream; nothing of ours lands any more.
//                Waits for FinishLoss (the node closes every client whose reply might depend
//                on a write the stream will never have), then follows again from the start.
//   kFailed      the follower stopped for good (the stream lost records it needs, or a record
//                does not decode): the partition is not served here (see failure())
//
// The coordinator (coordinator.h) decides when to claim (BeginClaim, then Step until the
// claim resolves) and to hand over (BeginRelease, FinishRelease), and calls FinishLoss; a
// fence is noticed here, by the log.
//
// The write path. Commit splits the batch by slot into one share per partition and appends
// each owned partition's share to its PartitionLog (a share over max_record_bytes as a
// group: kind-4 parts and a last kBatch); it does not wait. Shares of partitions not owned
// (changes a follower applied, or writes to a partition just lost) are dropped. Sync waits
// until every record appended before it began is durable (in the stream on a quorum): the
// engine's "durable" is the stream's. A stalled stream (no quorum) keeps Sync waiting, and
// with it every reply, as a slow fsync would. A partition fenced meanwhile becomes kLost, and
// Sync returns only once the loss is finished — so no reply that depended on the lost writes
// is released: the node closed those clients first.
//
// The local store (storage::ClusterTables) is a view of the streams: no fsync on the write
// path. A checkpoint records the partitions that may hold writes not yet in their stream
// (owned, claiming or lost: ckpt_open), writes the counters, and finishes by writing every
// partition's position of the cut taken in CheckpointCut: a follower's applied position, an
// owner's last appended sequence. A partition whose cut is not durable when the checkpoint
// finishes (lost meanwhile, or stopping without quorum) is rebuilt instead: its tables are
// emptied and its position reset, so that a restart reads its stream again from the start.
// Load rebuilds every partition a leftover ckpt_open names, loads the tables and follows
// every partition from its saved position (or, with options.follow_on_load false, leaves
// that to StartFollowers); the partitions in options.owned are claimed there (tests and
// tools; tallyd leaves claims to the coordinator).
//
// Snapshots and trimming (issue 14, partition_snapshots.cc; options.snapshot_every_records).
// After a checkpoint finishes, its tables are pinned (storage::ClusterTablesView) and, on a
// thread of its own, each owned partition saved at least snapshot_every_records past its
// newest snapshot is written to the snapshot stream (snapshot_store.h). Then its stream is
// trimmed below min(the snapshot's position, the trim floor) + 1: the trim floor is the
// lowest position saved for it by any node that counts (their heartbeats say it:
// Checkpointed; ClusterNode decides who counts), so that such a node's restart finds its
// records. A follower that finds its records gone (Follower::lost_records: a new node, a
// node back after the stream was trimmed, a lost partition read again from the start) is
// restored instead: the partitions to restore are dropped here (in one walk of the
// keyspace) and each in the tables, the newest snapshot is applied through the followers'
// path chunk by chunk, and a follower goes on from the snapshot's position (one partition
// at a time per two cores). The snapshot's values may be newer than
// its position (they are the tables'); records carry final values, so replaying the stream
// from there makes them exact, as after a restart.
//
// Threads: as engine/persistence.h for the Persistence calls; BeginClaim, Step, FinishLoss,
// BeginRelease, FinishRelease and AbortRelease from one thread (the coordinator's actor);
// HoldOwnership from the change feed's; the accessors from any thread. Attach
// before Load. The followers apply on threads of their own (Keyspace::ApplyReplicated); a
// renewal thread appends renewals to idle owned partitions. The partition streams must
// exist. Lock order: ownership_mutex_, checkpoint_record_mutex_, the keyspace's stripes,
// mutex_, then a follower's or a log's own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/follower.h"
#include "cluster/leader_connections.h"
#include "cluster/nats_client.h"
#include "cluster/partition_log.h"
#include "cluster/snapshot_store.h"
#include "core/periodic_thread.h"
#include "engine/persistence.h"
#include "storage/cluster_tables.h"

namespace tally::engine {
class Keyspace;
}  // namespace tally::engine

namespace tally::cluster {

struct ClusterPersistenceOptions {
  std::string data_dir;
  uint32_t partition_count = 0;
  std::vector<uint32_t> owned;              // claimed by Load (tests, tools); tallyd: none
  std::string stream_prefix = "TALLY_P";    // partition p's stream: <stream_prefix><p>
  std::string subject_prefix = "tally.p.";  // and its subject: <subject_prefix><p>
  std::string node_name;
  size_t max_in_flight = 4;
  int64_t publish_timeout_ms = 2000;
  size_t max_record_bytes = 256 * 1024;
  int64_t catch_up_timeout_ms = 60000;  // a claim's bound on reading up to the stream's tail
  // An owned partition with no record for this long gets a renewal: the standbys see the
  // owner alive (their lease, coordinator.h). 0: no renewals (tests of the write path).
  int64_t renew_ms = 500;
  // Stopping (BeginShutdown): how long Sync still waits for records that are not durable.
  int64_t shutdown_wait_ms = 3000;
  // Snapshots and trimming (see the top of this file): an owned partition saved at least
  // this many stream records past its newest snapshot gets a new one after a checkpoint.
  // 0: no snapshots, no trimming (the streams keep every record).
  uint64_t snapshot_every_records = 0;
  std::string snapshot_stream = "TALLY_SNAPSHOTS";  // must exist when snapshots are on
  std::string snapshot_subject_prefix = "tally.snap.";
  size_t snapshot_chunk_bytes = 256 * 1024;  // SnapshotStoreOptions::chunk_bytes
  // Load starts following every partition. A node sets it false and calls StartFollowers
  // once whatever watches the followers' writes (SetReplicationObserver) is in place: the
  // derived counters build their indexes from the loaded keyspace, and a group a follower
  // wrote after that scan and before the observer would be missing from them for good.
  // Claiming options.owned needs the followers: Load starts them then, whatever this says.
  bool follow_on_load = true;
  // When set, a claimed partition's log publishes through the connection on the server
  // that led its stream when the claim began (LeaderConnections::On), when there is one:
  // each record and PubAck cross no route between servers. Else through `connection`.
  // REQUIRES: outlives the ClusterPersistence.
  const LeaderConnections* leaders = nullptr;
};

// The stream and subject of partition p under `options`' prefixes.
std::string PartitionStream(const ClusterPersistenceOptions& options, uint32_t partition);
std::string PartitionSubject(const ClusterPersistenceOptions& options, uint32_t partition);

enum class PartitionRole : uint8_t {
  kFollowing,
  kCatchingUp,
  kClaiming,
  kOwned,
  kReleasing,
  kLost,
  kFailed,
};
std::string_view PartitionRoleName(PartitionRole role);
// The roles in which this node's commits go to the partition's stream: kOwned, kReleasing.
bool CommitsToStream(PartitionRole role);

// One partition as this node holds it, for the coordinator, INFO and GET /v1/cluster.
struct PartitionStatus {
  PartitionRole role = PartitionRole::kFollowing;
  // Following: the position applied. Owned: the writer's (durable sequence, term, writer).
  storage::StreamPosition position;
  uint64_t appended_seq = 0;                                  // owned: the last record appended
  PartitionLogState log_state = PartitionLogState::kWriting;  // owned, claiming
  // Owned: when this node first sent its newest durable record (PartitionLogProgress).
  std::chrono::steady_clock::time_point durable_sent_at;
  // Who owns it as the stream says (the latest claim this node read or wrote; term 0: none
  // seen yet), and the owner's latest record seen.
  PartitionOwner owner;
  std::string failure;  // kFailed: why
  // Owned: the NATS server its records go to, named, when its log was started on the
  // connection to its stream's leader (ClusterPersistenceOptions::leaders); else empty.
  std::string log_server;
  // The newest snapshot this node wrote or restored from (its position's sequence), and
  // the sequence its stream was trimmed below by this node; 0: none.
  uint64_t snapshot_seq = 0;
  uint64_t trimmed_below = 0;
  // Restoring from a snapshot: counters applied so far of how many (progress).
  bool restoring = false;
  uint64_t restored_counters = 0;
  uint64_t restore_counters = 0;
  // Following a partition this node lost, not yet up to the record that fenced it: the
  // owner above is this node's own old claim, which says nothing of the owner's silence.
  bool behind_fence = false;
};

// Counts since the start, for tests and INFO.
struct SnapshotStats {
  uint64_t written = 0;   // snapshots written
  uint64_t trims = 0;     // purges of a partition stream
  uint64_t restores = 0;  // partitions restored from a snapshot
  uint64_t failures = 0;  // snapshot, trim or restore attempts that failed (retried)
};

class ClusterPersistence final : public engine::Persistence {
 public:
  // Opens the local store. kInvalidArgument for an owned partition out of range or a store
  // of another layout or partition count. REQUIRES: `connection` outlives it.
  static Result<std::unique_ptr<ClusterPersistence>> Open(NatsConnection& connection,
                                                          ClusterPersistenceOptions options);
  // Close()s.
  ~ClusterPersistence() override;

  // Stops the renewals, the followers and the logs (records not yet durable stay unknown).
  // The followers apply to the attached keyspace: stop the engine (its last commit), then
  // Close, then destroy the engine.
  void Close();
  // The node stops: Sync waits at most shutdown_wait_ms more for records not yet durable,
  // then returns (no client hears of them: the servers stopped first; the last checkpoint
  // rebuilds those partitions).
  void BeginShutdown();

  // The keyspace the followers apply to. REQUIRES: called once, before Load; `keyspace`
  // outlives this object.
  void Attach(engine::Keyspace& keyspace);
  // What this node's claims say of it (node_name, redis_address, http_address). Before the
  // first claim.
  void SetIdentity(ClaimBody identity);
  // Told of what followers apply (KeyspaceApplier::Observer) and of a partition forgotten
  // whole (a loss: its slots), so that the derived counters' indexes follow. After Attach.
  void SetReplicationObserver(KeyspaceApplier::Observer applied,
                              std::function<void(SlotRange slots)> forgotten);
  // Starts following every partition Load left waiting (options.follow_on_load false): after
  // Load and SetReplicationObserver, before the coordinator runs. Idempotent.
  void StartFollowers();
  // Called, on any thread and with no lock held, when a partition changes role by itself
  // (fenced: kLost) or a restore finished (the follower is to be started: Step).
  void SetOnChange(std::function<void()> on_change);
  // The partitions' snapshot store, which also keeps the change stream's catalog snapshots
  // (change_feed.h); null when snapshots are off.
  SnapshotStore* snapshots() { return snapshots_.get(); }
  // The lowest sequence saved for `partition` by the nodes that count (from their
  // heartbeats): no record above it is trimmed. Called on the snapshot thread. Unset: this
  // node's own only.
  void SetTrimFloor(std::function<uint64_t(uint32_t partition)> floor);
  // For each partition, the sequence this node's last finished checkpoint saved (what a
  // restart follows on from; 0: none): what its heartbeats say. Any thread.
  std::vector<uint64_t> Checkpointed() const;

  Status Commit(const engine::CommitBatch& batch, bool sync) override;
  Status Sync() override;
  Status Load(engine::LoadVisitor& visitor) override;
  Result<uint64_t> BeginCheckpoint() override;
  Status CheckpointWrite(const engine::CommitBatch& batch) override;
  Status FinishCheckpoint(uint64_t token) override;
  void CheckpointCut(uint64_t token) override;
  engine::PersistenceStats stats() const override;
  Status WriteCatalog(std::span<const CatalogOp> ops) override;
  Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog() override;

  // Ownership (the coordinator's thread).
  // kFollowing -> kCatchingUp: reads the stream's tail (one JetStream request, bounded by the
  // connection's request timeout). `seen` is the owner as the caller decided on it (from
  // status()): the claim is given up if reading up to the tail shows a newer claim or a newer
  // record of that owner (it is alive after all). kUnavailable when not following;
  // the NATS error when the tail cannot be read (the partition stays kFollowing).
  Status BeginClaim(uint32_t partition, const PartitionOwner& seen);
  // Moves every claim on (kCatchingUp -> kClaiming -> kOwned, or back to kFollowing when
  // another node claimed first or the tail is not reached within catch_up_timeout_ms) and
  // starts followers that could not be started before. Returns the partitions whose role
  // changed. Does not wait for NATS beyond starting a follower or a log.
  std::vector<uint32_t> Step();
  // kLost -> kFollowing (kUnavailable when not lost). REQUIRES: the node has closed every client
  // whose replies might depend on writes to the partition (its own routing refuses new ones).
  // Forgets the partition's counters in the keyspace and the tables and follows its stream again
  // from the start.
  Status FinishLoss(uint32_t partition);
  // kOwned -> kReleasing. kUnavailable when not owned, or while its stream stalls.
  Status BeginRelease(uint32_t partition);
  // kReleasing -> kFollowing, once every write the keyspace held when this was called is
  // durable in the stream (commits drain in epoch order: the epochs up to the open one, or
  // up to the one before when nothing was written in it, appended and acknowledged), then
  // follows the partition from its last record. REQUIRES: no write can reach the partition
  // any more (its route has been TRYAGAIN and every worker has folded its increments since).
  // Waits at most `timeout`; on an error (kUnavailable: a timeout, a fence; kInternal: a
  // record appended meanwhile, which no write should have) the partition is left as it is:
  // the caller makes it kOwned again (AbortRelease), or it is lost.
  Status FinishRelease(uint32_t partition, std::chrono::milliseconds timeout);
  // kReleasing -> kOwned.
  void AbortRelease(uint32_t partition);
  // A shared hold that keeps the owned partitions from being handed over or forgotten
  // (FinishRelease, FinishLoss) until it is let go: the change feed's, while it applies a push
  // to them. Taken before the keyspace's stripes.
  std::shared_lock<std::shared_mutex> HoldOwnership() const;
  // The partitions owned now, ascending.
  std::vector<uint32_t> Owned() const;
  // Claims `partition` now: BeginClaim, then Step until it is owned (or `timeout`). Tests and
  // Load's options.owned.
  Status ClaimNow(uint32_t partition, std::chrono::milliseconds timeout);

  uint32_t partition_count() const { return options_.partition_count; }
  PartitionStatus status(uint32_t partition) const;
  PartitionRole role(uint32_t partition) const;
  const std::string& node_id() const { return tables_->node_id(); }
  const ClusterPersistenceOptions& options() const { return options_; }
  // The follower of a partition being followed (nullptr otherwise). Tests.
  const Follower* follower(uint32_t partition) const;
  // The log of an owned partition (nullptr otherwise). Tests.
  const PartitionLog* log(uint32_t partition) const;
  SnapshotStats snapshot_stats() const;

 private:
  // One partition on this node. Guarded by mutex_ (the pointers: what they point to is
  // thread-safe on its own, and shared so that a caller may use it after unlocking).
  struct Partition {
    PartitionRole role = PartitionRole::kFollowing;
    std::unique_ptr<Follower> follower;  // kFollowing, kCatchingUp
    std::shared_ptr<PartitionLog> log;   // kClaiming, kOwned, kReleasing, kLost
    RecordHeader header;                 // the ownership's, for its records
    ClaimBody claim;                     // kClaiming, kOwned: the claim written
    storage::StreamPosition from;        // where to follow from (a follower to start)
    bool follower_wanted = false;        // kFollowing without a follower: start one
    uint64_t claim_tail = 0;             // kCatchingUp: the tail the claim goes after
    std::string claim_leader;            // kCatchingUp: its stream's leader then
    std::string log_server;              // PartitionStatus::log_server
    PartitionOwner claim_seen;           // kCatchingUp: the owner the claim replaces
    uint64_t claim_seq = 0;              // kClaiming: the claim's sequence
    std::chrono::steady_clock::time_point claim_deadline;
    uint64_t committed_seq = 0;                         // owned: the last record Commit appended
    std::chrono::steady_clock::time_point last_append;  // owned: for renewals
    PartitionOwner last_owner;  // the owner as last known (kept across role changes)
    // Lost: where the stream holds the record that fenced this node's writer. Until its
    // follower has read that far, last_owner (this node's own old claim) is known stale.
    uint64_t fenced_at = 0;
    std::string failure;        // kFailed
    uint64_t checkpointed = 0;  // the sequence the last finished checkpoint saved
    uint64_t snapshot_seq = 0;  // see PartitionStatus
    uint64_t trimmed_below = 0;
    bool snapshot_known = false;  // snapshot_seq asked of the snapshot stream once
    bool restore_wanted = false;  // kFollowing without a follower: restore, then follow
    bool restoring = false;
    uint64_t restored_counters = 0;
    uint64_t restore_counters = 0;
  };

  // The wall clock, for the records' owner_unix_ms.
  static int64_t NowUnixMs();

  // An owned partition's writer as Commit and the renewals take it under mutex_, to append
  // after unlocking.
  struct Writer {
    uint32_t partition;
    std::shared_ptr<PartitionLog> log;
    RecordHeader header;
  };

  ClusterPersistence(NatsConnection& connection, ClusterPersistenceOptions options,
                     std::unique_ptr<storage::ClusterTables> tables);

  FollowerOptions FollowerOptionsFor(uint32_t partition) const;
  // Starts the follower of a partition from partitions_[p].from, if still wanted.
  // REQUIRES: mutex_ not held.
  void StartFollower(uint32_t partition);
  // The steps of a claim (Step). REQUIRES: mutex_ not held.
  bool StepCatchingUp(uint32_t partition);
  bool StepClaiming(uint32_t partition);
  // A log reports progress (on its thread): a fenced log makes its partition kLost.
  void OnLogProgress(uint32_t partition, uint64_t writer, const PartitionLogProgress& progress);
  // kOwned -> kLost, when `writer` is still the partition's writer. Any thread, no lock held.
  void MarkLost(uint32_t partition, uint64_t writer);
  // Appends one share as a record, or as a group when it is too large; returns the
  // sequence of its last record. REQUIRES: one Commit at a time (uses encoded_).
  Result<uint64_t> AppendShare(PartitionLog& log, const RecordHeader& header,
                               const engine::CommitBatch& batch, const BatchShare& share);
  void RenewIdle();
  // Snapshots, trimming and restores (partition_snapshots.cc), on snapshot_thread_.
  void RunSnapshots();
  void SnapshotAndTrim(const storage::ClusterTablesView& view, uint32_t partition);
  // False when no node could restore the partition from its newest snapshot (at
  // `snapshot_seq`): its stream, as its leader says, begins past the record after it, or
  // the snapshot's chunks are gone (SnapshotStore::Whole).
  bool SnapshotUsable(uint32_t partition, uint64_t snapshot_seq);
  // False when it could not be done now (to be tried again later). RestoreAll runs a few
  // at once; false when any failed.
  bool Restore(uint32_t partition);
  bool RestoreAll(const std::vector<uint32_t>& partitions);
  // One attempt from the newest snapshot; kNotFound when it was replaced while read.
  // REQUIRES: the partition dropped from the keyspace (DropPartitions).
  Status RestoreFromLatest(uint32_t partition);
  // Forgets, in one walk of the keyspace, what it holds of those of `partitions` still
  // followed without a follower (to be restored).
  void DropPartitions(std::span<const uint32_t> partitions);
  // A follower stopped at a gap: restore the partition (REQUIRES: mutex_ held).
  void WantRestoreLocked(Partition& partition);
  // The partitions that may hold writes not yet in their stream. REQUIRES: mutex_ held.
  std::vector<uint32_t> MayHoldUnstreamedLocked() const;
  void NotifyChange();

  NatsConnection& connection_;
  const ClusterPersistenceOptions options_;
  std::unique_ptr<storage::ClusterTables> tables_;
  std::unique_ptr<KeyspaceApplier> applier_;
  engine::Keyspace* keyspace_ = nullptr;
  std::string encoded_;  // Commit's
  PeriodicThread renewer_;
  std::unique_ptr<SnapshotStore> snapshots_;  // null: snapshots off

  // Held shared by the change feed while it applies a push to the owned partitions, and
  // exclusively while a partition stops being owned for good (FinishRelease, FinishLoss).
  // Before mutex_ and the keyspace's stripes.
  mutable std::shared_mutex ownership_mutex_;
  // Held while the open checkpoint's record is read and written (BeginCheckpoint,
  // StepClaiming), so that the last record written names every partition. Before mutex_.
  std::mutex checkpoint_record_mutex_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;  // a loss finished, or shutdown began
  // Guarded by mutex_:
  std::vector<Partition> partitions_;  // index = partition
  std::function<void()> on_change_;
  std::function<void(SlotRange)> on_forgotten_;
  uint64_t committed_epoch_ = 0;  // the epoch of the last batch Commit took
  ClaimBody identity_;
  bool shutting_down_ = false;
  std::chrono::steady_clock::time_point shutdown_deadline_;
  bool closed_ = false;
  // The checkpoint in progress (one at a time): its token, its cut (a position per
  // partition; the writer of an owned one identifies the log it came from), the partitions
  // named in its ckpt_open, and those lost since it began.
  bool checkpoint_open_ = false;
  uint64_t cut_token_ = 0;
  std::vector<storage::StreamPosition> cut_;
  std::vector<bool> cut_owned_;
  std::vector<uint32_t> checkpoint_partitions_;
  std::vector<uint32_t> lost_in_checkpoint_;
  uint64_t next_token_ = 1;
  // The snapshot thread's work: the tables as the last checkpoint left them, and the
  // partitions it saved as their owner; partitions to restore are marked restore_wanted.
  std::shared_ptr<const storage::ClusterTablesView> snapshot_view_;
  std::vector<uint32_t> snapshot_partitions_;
  std::function<uint64_t(uint32_t)> trim_floor_;
  SnapshotStats snapshot_stats_;
  bool snapshot_stop_ = false;
  std::condition_variable snapshot_wake_;
  std::thread snapshot_thread_;  // started by Load when snapshots are on
};

}  // namespace tally::cluster
