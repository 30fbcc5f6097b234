#include "cluster/cluster_persistence.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/slot.h"
#include "core/thread_name.h"
#include "engine/keyspace.h"

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

// Splits `share` into at most `parts` non-empty shares of about equal operation counts, in
// order (the clear, if any, in the first). REQUIRES: share.operations() >= parts > 0.
std::vector<BatchShare> SplitShare(const BatchShare& share, size_t parts) {
  const size_t total = share.deletes.size() + share.puts.size();
  const size_t per_part = (total + parts - 1) / parts;
  std::vector<BatchShare> split((total + per_part - 1) / per_part);
  split[0].clear = share.clear;
  size_t operation = 0;
  for (uint32_t index : share.deletes) split[operation++ / per_part].deletes.push_back(index);
  for (uint32_t index : share.puts) split[operation++ / per_part].puts.push_back(index);
  return split;
}

}  // namespace

std::string PartitionStream(const ClusterPersistenceOptions& options, uint32_t partition) {
  return options.stream_prefix + std::to_string(partition);
}

std::string PartitionSubject(const ClusterPersistenceOptions& options, uint32_t partition) {
  return options.subject_prefix + std::to_string(partition);
}

bool CommitsToStream(PartitionRole role) {
  return role == PartitionRole::kOwned || role == PartitionRole::kReleasing;
}

std::string_view PartitionRoleName(PartitionRole role) {
  switch (role) {
    case PartitionRole::kFollowing:
      return "following";
    case PartitionRole::kCatchingUp:
      return "catching-up";
    case PartitionRole::kClaiming:
      return "claiming";
    case PartitionRole::kOwned:
      return "owned";
    case PartitionRole::kReleasing:
      return "releasing";
    case PartitionRole::kLost:
      return "lost";
    case PartitionRole::kFailed:
      return "failed";
  }
  return "unknown";
}

int64_t ClusterPersistence::NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<std::unique_ptr<ClusterPersistence>> ClusterPersistence::Open(
    NatsConnection& connection, ClusterPersistenceOptions options) {
  std::sort(options.owned.begin(), options.owned.end());
  options.owned.erase(std::unique(options.owned.begin(), options.owned.end()), options.owned.end());
  for (uint32_t p : options.owned) {
    if (p >= options.partition_count) {
      return InvalidArgument(
          fmt::format("owned partition {} of {} partitions", p, options.partition_count));
    }
  }
  auto tables = storage::ClusterTables::Open(
      {.path = options.data_dir, .partition_count = options.partition_count});
  if (!tables) return tl::unexpected(tables.error());
  return std::unique_ptr<ClusterPersistence>(
      new ClusterPersistence(connection, std::move(options), std::move(*tables)));
}

ClusterPersistence::ClusterPersistence(NatsConnection& connection,
                                       ClusterPersistenceOptions options,
                                       std::unique_ptr<storage::ClusterTables> tables)
    : connection_(connection),
      options_(std::move(options)),
      tables_(std::move(tables)),
      renewer_(
          std::chrono::milliseconds(std::max<int64_t>(options_.renew_ms / 2, 1)),
          [this] { RenewIdle(); }, "renewals"),
      partitions_(options_.partition_count),
      cut_(options_.partition_count),
      cut_owned_(options_.partition_count, false) {
  identity_.node_name = options_.node_name;
  if (options_.snapshot_every_records > 0) {
    snapshots_ = std::make_unique<SnapshotStore>(
        connection_, SnapshotStoreOptions{.stream = options_.snapshot_stream,
                                          .subject_prefix = options_.snapshot_subject_prefix,
                                          .chunk_bytes = options_.snapshot_chunk_bytes});
  }
}

ClusterPersistence::~ClusterPersistence() { Close(); }

void ClusterPersistence::Close() {
  renewer_.Stop();
  {
    std::lock_guard lock(mutex_);
    snapshot_stop_ = true;
  }
  snapshot_wake_.notify_all();
  if (snapshot_thread_.joinable()) snapshot_thread_.join();
  std::vector<std::unique_ptr<Follower>> followers;
  std::vector<std::shared_ptr<PartitionLog>> logs;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    for (Partition& partition : partitions_) {
      if (partition.follower) followers.push_back(std::move(partition.follower));
      if (partition.log) logs.push_back(std::move(partition.log));
      partition.follower_wanted = false;
    }
  }
  changed_.notify_all();
  // Outside the lock: a follower's thread may be waiting for the keyspace's stripes, and a
  // log's thread may be reporting progress (which locks mutex_).
  followers.clear();
  logs.clear();
}

void ClusterPersistence::BeginShutdown() {
  {
    std::lock_guard lock(mutex_);
    shutting_down_ = true;
    shutdown_deadline_ = Clock::now() + std::chrono::milliseconds(options_.shutdown_wait_ms);
  }
  changed_.notify_all();
}

void ClusterPersistence::Attach(engine::Keyspace& keyspace) {
  keyspace_ = &keyspace;
  applier_ = std::make_unique<KeyspaceApplier>(keyspace, options_.partition_count);
}

void ClusterPersistence::SetIdentity(ClaimBody identity) {
  std::lock_guard lock(mutex_);
  identity_ = std::move(identity);
}

void ClusterPersistence::SetReplicationObserver(KeyspaceApplier::Observer applied,
                                                std::function<void(SlotRange slots)> forgotten) {
  applier_->SetObserver(std::move(applied));
  std::lock_guard lock(mutex_);
  on_forgotten_ = std::move(forgotten);
}

void ClusterPersistence::SetOnChange(std::function<void()> on_change) {
  std::lock_guard lock(mutex_);
  on_change_ = std::move(on_change);
}

void ClusterPersistence::NotifyChange() {
  changed_.notify_all();
  std::function<void()> on_change;
  {
    std::lock_guard lock(mutex_);
    on_change = on_change_;
  }
  if (on_change) on_change();
}

FollowerOptions ClusterPersistence::FollowerOptionsFor(uint32_t partition) const {
  FollowerOptions follower;
  follower.stream = PartitionStream(options_, partition);
  follower.subject = PartitionSubject(options_, partition);
  follower.partition = partition;
  return follower;
}

Status ClusterPersistence::Load(engine::LoadVisitor& visitor) {
  if (!applier_) return MakeError(ErrorCode::kInternal, "ClusterPersistence: Load before Attach");
  auto open = tables_->ReadOpenCheckpoint();
  if (!open) return tl::unexpected(open.error());
  if (*open) {
    // A checkpoint cut short: the partitions it names may hold values their streams never got.
    for (uint32_t p : **open) {
      spdlog::warn("partition {}: a checkpoint did not finish; rebuilding it from its stream", p);
      if (auto status = tables_->RebuildPartition(p); !status) return status;
    }
    if (auto status = tables_->CloseOpenCheckpoint(); !status) return status;
  }
  if (auto status = tables_->LoadCounters(visitor); !status) return status;
  auto positions = tables_->ReadPositions();
  if (!positions) return tl::unexpected(positions.error());
  {
    std::lock_guard lock(mutex_);
    for (uint32_t p = 0; p < options_.partition_count; ++p) {
      partitions_[p].from = (*positions)[p];
      partitions_[p].checkpointed = (*positions)[p].seq;
      partitions_[p].follower_wanted = true;
      cut_[p] = (*positions)[p];
    }
  }
  if (options_.follow_on_load || !options_.owned.empty()) StartFollowers();
  for (uint32_t p : options_.owned) {
    if (auto status = ClaimNow(p, std::chrono::milliseconds(options_.catch_up_timeout_ms));
        !status) {
      return status;
    }
  }
  if (options_.renew_ms > 0) renewer_.Start();
  if (snapshots_ && !snapshot_thread_.joinable()) {
    snapshot_thread_ = NamedThread("snapshots", [this] { RunSnapshots(); });
  }
  return OkStatus();
}

void ClusterPersistence::StartFollowers() {
  for (uint32_t p = 0; p < options_.partition_count; ++p) StartFollower(p);
}

void ClusterPersistence::StartFollower(uint32_t partition) {
  storage::StreamPosition from;
  bool fetch_claim = false;
  {
    std::lock_guard lock(mutex_);
    const Partition& p = partitions_[partition];
    if (!p.follower_wanted || closed_ || p.role != PartitionRole::kFollowing) return;
    from = p.from;
    fetch_claim = from.term > 0 && p.last_owner.term != from.term;
  }
  const std::string stream = PartitionStream(options_, partition);
  ClaimBody claim;
  if (fetch_claim) {
    // Following on from a saved position: the claim of the ownership in force there says
    // who owns the partition (for routing), until a newer claim is read.
    auto message = connection_.GetMessage(stream, from.term);
    if (!message) {
      spdlog::warn("partition {}: cannot read its owner's claim yet: {}", partition,
                   message.error().message);
      return;
    }
    if (*message) {
      if (auto record = DecodeRecord((*message)->data);
          record && record->kind == RecordKind::kClaim) {
        claim = std::move(record->claim);
      }
    }
  }
  auto follower = Follower::Start(connection_, FollowerOptionsFor(partition), from, *applier_);
  std::unique_ptr<Follower> unused;
  {
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[partition];
    if (fetch_claim) {
      p.last_owner.term = from.term;
      p.last_owner.claim = std::move(claim);
      p.last_owner.last_record_seq = std::max(p.last_owner.last_record_seq, from.term);
    }
    if (!follower) {
      if (follower.error().code == ErrorCode::kCorruption) {
        p.role = PartitionRole::kFailed;
        p.failure = follower.error().message;
        p.follower_wanted = false;
        spdlog::error("partition {}: {}", partition, p.failure);
      } else {
        spdlog::warn("partition {}: cannot follow its stream yet: {}", partition,
                     follower.error().message);
      }
      return;
    }
    if (p.follower_wanted && !closed_ && p.role == PartitionRole::kFollowing) {
      p.follower = std::move(*follower);
      p.follower_wanted = false;
    } else {
      unused = std::move(*follower);
    }
  }
}

Result<uint64_t> ClusterPersistence::AppendShare(PartitionLog& log, const RecordHeader& header,
                                                 const engine::CommitBatch& batch,
                                                 const BatchShare& share) {
  EncodeBatch(header, batch, share, &encoded_);
  if (encoded_.size() <= options_.max_record_bytes) {
    return log.Append(RecordKind::kBatch, std::move(encoded_));
  }
  // Too large for one record: a group of parts, split finer until every part fits. A part
  // holds at least one operation, and one operation (a key) is far below a record's limit;
  // a single operation still too large is refused by Append.
  const size_t operations = share.deletes.size() + share.puts.size();
  size_t parts = std::min(operations, encoded_.size() / options_.max_record_bytes + 1);
  std::vector<std::string> records;
  while (records.empty()) {
    const std::vector<BatchShare> split = SplitShare(share, parts);
    for (size_t i = 0; i < split.size(); ++i) {
      std::string bytes;
      EncodeBatch(header, batch, split[i], &bytes,
                  i + 1 == split.size() ? RecordKind::kBatch : RecordKind::kPart);
      if (bytes.size() > options_.max_record_bytes && parts < operations) {
        records.clear();
        parts = std::min(operations, parts * 2);
        break;
      }
      records.push_back(std::move(bytes));
    }
  }
  Result<uint64_t> seq = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    seq = log.Append(i + 1 == records.size() ? RecordKind::kBatch : RecordKind::kPart,
                     std::move(records[i]));
    if (!seq) return seq;
  }
  return seq;
}

Status ClusterPersistence::Commit(const engine::CommitBatch& batch, [[maybe_unused]] bool sync) {
  const std::vector<BatchShare> shares = SplitBatch(batch, options_.partition_count);
  std::vector<Writer> targets;
  {
    std::lock_guard lock(mutex_);
    for (uint32_t p = 0; p < options_.partition_count; ++p) {
      if (shares[p].empty() || !CommitsToStream(partitions_[p].role)) continue;
      targets.push_back({p, partitions_[p].log, partitions_[p].header});
    }
  }
  const int64_t now_ms = NowUnixMs();
  for (Writer& target : targets) {
    target.header.epoch = batch.epoch();
    target.header.owner_unix_ms = now_ms;
    auto seq = AppendShare(*target.log, target.header, batch, shares[target.partition]);
    if (!seq) {
      // Fenced, or a share that cannot be written: none of it will be acknowledged. The
      // partition is handled as lost (the node closes the clients that wait for it).
      spdlog::error("partition {}: cannot append epoch {}: {}", target.partition, batch.epoch(),
                    seq.error().message);
      MarkLost(target.partition, target.header.writer);
      continue;
    }
    std::lock_guard lock(mutex_);
    Partition& p = partitions_[target.partition];
    if (p.header.writer == target.header.writer) {
      p.committed_seq = std::max(p.committed_seq, *seq);
      p.last_append = Clock::now();
    }
  }
  // Only once every share is appended (FinishRelease reads committed_seq after this).
  std::lock_guard lock(mutex_);
  committed_epoch_ = std::max(committed_epoch_, batch.epoch());
  return OkStatus();
}

Status ClusterPersistence::Sync() {
  struct Target {
    uint32_t partition;
    std::shared_ptr<PartitionLog> log;
    uint64_t seq;
    uint64_t writer;
  };
  std::vector<Target> targets;
  {
    std::lock_guard lock(mutex_);
    for (uint32_t p = 0; p < options_.partition_count; ++p) {
      const Partition& partition = partitions_[p];
      if (partition.log &&
          (CommitsToStream(partition.role) || partition.role == PartitionRole::kLost)) {
        targets.push_back({p, partition.log, partition.committed_seq, partition.header.writer});
      }
    }
  }
  const auto gave_up = [this] {
    std::lock_guard lock(mutex_);
    return closed_ || (shutting_down_ && Clock::now() >= shutdown_deadline_);
  };
  for (const Target& target : targets) {
    while (true) {
      const PartitionLogProgress progress =
          target.log->WaitDurable(target.seq, std::chrono::milliseconds(100));
      if (progress.durable_seq >= target.seq) break;
      if (progress.state == PartitionLogState::kFenced) {
        MarkLost(target.partition, target.writer);
        break;
      }
      if (gave_up()) {
        spdlog::error("partition {}: records {} to {} not durable at shutdown", target.partition,
                      progress.durable_seq + 1, target.seq);
        break;
      }
    }
  }
  // No reply may leave that depended on a lost partition's writes: the node closes those
  // clients, then FinishLoss.
  std::unique_lock lock(mutex_);
  while (true) {
    const bool lost = std::any_of(partitions_.begin(), partitions_.end(), [](const Partition& p) {
      return p.role == PartitionRole::kLost;
    });
    if (!lost || closed_ || (shutting_down_ && Clock::now() >= shutdown_deadline_)) break;
    changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  return OkStatus();
}

void ClusterPersistence::RenewIdle() {
  std::vector<Writer> targets;
  const auto now = Clock::now();
  {
    std::lock_guard lock(mutex_);
    for (uint32_t p = 0; p < options_.partition_count; ++p) {
      const Partition& partition = partitions_[p];
      if (CommitsToStream(partition.role) &&
          now - partition.last_append >= std::chrono::milliseconds(options_.renew_ms)) {
        targets.push_back({p, partition.log, partition.header});
      }
    }
  }
  std::string bytes;
  for (Writer& target : targets) {
    target.header.owner_unix_ms = NowUnixMs();
    EncodeRenew(target.header, &bytes);
    if (auto seq = target.log->Append(RecordKind::kRenew, std::move(bytes)); !seq) {
      MarkLost(target.partition, target.header.writer);
      continue;
    }
    std::lock_guard lock(mutex_);
    if (partitions_[target.partition].header.writer == target.header.writer) {
      partitions_[target.partition].last_append = now;
    }
  }
}

std::vector<uint32_t> ClusterPersistence::MayHoldUnstreamedLocked() const {
  std::vector<uint32_t> partitions;
  for (uint32_t p = 0; p < options_.partition_count; ++p) {
    const PartitionRole role = partitions_[p].role;
    if (CommitsToStream(role) || role == PartitionRole::kClaiming || role == PartitionRole::kLost) {
      partitions.push_back(p);
    }
  }
  return partitions;
}

Result<uint64_t> ClusterPersistence::BeginCheckpoint() {
  std::lock_guard record(checkpoint_record_mutex_);
  std::vector<uint32_t> partitions;
  uint64_t token;
  {
    std::lock_guard lock(mutex_);
    partitions = MayHoldUnstreamedLocked();
    checkpoint_open_ = true;
    checkpoint_partitions_ = partitions;
    lost_in_checkpoint_.clear();
    token = next_token_++;
  }
  // Under checkpoint_record_mutex_: a claim finishing now rewrites the record with its
  // partition added (StepClaiming) only after this write.
  if (auto status = tables_->BeginCheckpoint(partitions); !status) {
    std::lock_guard lock(mutex_);
    checkpoint_open_ = false;
    return tl::unexpected(status.error());
  }
  return token;
}

void ClusterPersistence::CheckpointCut(uint64_t token) {
  std::lock_guard lock(mutex_);
  cut_token_ = token;
  for (uint32_t p = 0; p < options_.partition_count; ++p) {
    const Partition& partition = partitions_[p];
    cut_owned_[p] = false;
    switch (partition.role) {
      case PartitionRole::kOwned:
      case PartitionRole::kReleasing:
      case PartitionRole::kLost:
        // The last record of a commit: renewals appended since hold no value. Those already
        // durable (no commit lies between) let the saved position, and trimming, pass them.
        cut_[p] = {std::max(partition.committed_seq, partition.log->progress().durable_seq),
                   partition.header.term, partition.header.writer};
        cut_owned_[p] = true;
        break;
      case PartitionRole::kFollowing:
      case PartitionRole::kCatchingUp:
        cut_[p] = partition.follower ? partition.follower->position() : partition.from;
        break;
      case PartitionRole::kClaiming:
      case PartitionRole::kFailed:
        cut_[p] = partition.from;
        break;
    }
  }
}

Status ClusterPersistence::CheckpointWrite(const engine::CommitBatch& batch) {
  return tables_->CheckpointWrite(batch);
}

Status ClusterPersistence::FinishCheckpoint(uint64_t token) {
  std::vector<storage::StreamPosition> positions;
  std::vector<uint32_t> rebuild;
  std::vector<uint32_t> saved_owned;  // owned partitions whose saved values all stand
  {
    std::lock_guard lock(mutex_);
    if (cut_token_ != token) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("checkpoint {} finished without its cut", token));
    }
    positions = cut_;
    rebuild = lost_in_checkpoint_;
    for (uint32_t p = 0; p < options_.partition_count; ++p) {
      if (!cut_owned_[p]) continue;
      const Partition& partition = partitions_[p];
      // The values written came from this node's writes up to the cut: they stand only when
      // all of those are in the stream.
      // Or, handed over since (FinishRelease), all of its records were durable then.
      const bool durable =
          (CommitsToStream(partition.role) && partition.header.writer == cut_[p].writer &&
           partition.log->progress().durable_seq >= cut_[p].seq) ||
          (partition.role == PartitionRole::kFollowing && partition.from.writer == cut_[p].writer &&
           partition.from.seq >= cut_[p].seq);
      if (!durable) {
        spdlog::warn(
            "partition {}: not all of its checkpointed values are in its stream: its tables "
            "are emptied and its saved position reset",
            p);
        rebuild.push_back(p);
      } else if (CommitsToStream(partition.role)) {
        saved_owned.push_back(p);
      }
    }
  }
  std::sort(rebuild.begin(), rebuild.end());
  rebuild.erase(std::unique(rebuild.begin(), rebuild.end()), rebuild.end());
  // Rebuilt: those, and those dropped while the checkpoint ran (a loss, a restore), of which
  // it may have read some values. Before the open checkpoint's record goes: a crash in
  // between rebuilds them again.
  for (uint32_t p : rebuild) {
    if (auto status = tables_->RebuildPartition(p); !status) return status;
    positions[p] = {};
  }
  Status finished = tables_->FinishCheckpoint(positions);
  // Before the next checkpoint may begin: the tables as this one left them.
  std::shared_ptr<const storage::ClusterTablesView> view;
  if (finished && snapshots_) view = tables_->Pin();
  {
    std::lock_guard lock(mutex_);
    checkpoint_open_ = false;
    lost_in_checkpoint_.clear();
    if (finished) {
      for (uint32_t p = 0; p < options_.partition_count; ++p) {
        partitions_[p].checkpointed = positions[p].seq;
      }
      if (view) {
        std::erase_if(saved_owned, [&](uint32_t p) {
          return std::binary_search(rebuild.begin(), rebuild.end(), p);
        });
        snapshot_view_ = std::move(view);
        snapshot_partitions_ = std::move(saved_owned);
      }
    }
  }
  snapshot_wake_.notify_all();
  // The tables lost every counter of the rebuilt partitions, also those the keyspace holds
  // and will not change again: the next checkpoint writes those partitions' counters (not
  // every counter: restores overlap checkpoints all the time on a node that restores many).
  if (!rebuild.empty() && keyspace_ != nullptr) {
    std::vector<SlotRange> ranges;
    for (uint32_t p : rebuild) ranges.push_back(PartitionSlots(p, options_.partition_count));
    keyspace_->RequireCheckpointOf(ranges);
  }
  return finished;
}

engine::PersistenceStats ClusterPersistence::stats() const {
  engine::PersistenceStats stats;
  stats.disk_bytes = tables_->disk_bytes();
  if (snapshots_) {
    // Idle partitions grow by renewals only, which change no counter: save their positions
    // now and then all the same, or their streams could never be trimmed.
    std::lock_guard lock(mutex_);
    for (const Partition& partition : partitions_) {
      uint64_t seq = partition.from.seq;
      if (partition.follower) seq = partition.follower->position().seq;
      if (partition.log && CommitsToStream(partition.role)) {
        seq = partition.log->progress().durable_seq;
      }
      if (seq >= partition.checkpointed + options_.snapshot_every_records) {
        stats.checkpoint_wanted = true;
        break;
      }
    }
  }
  return stats;
}

Status ClusterPersistence::WriteCatalog(std::span<const CatalogOp> ops) {
  return tables_->WriteCatalog(ops);
}

Result<std::vector<std::pair<std::string, std::string>>> ClusterPersistence::ReadCatalog() {
  return tables_->ReadCatalog();
}

PartitionStatus ClusterPersistence::status(uint32_t partition) const {
  std::lock_guard lock(mutex_);
  const Partition& p = partitions_[partition];
  PartitionStatus status;
  status.role = p.role;
  status.owner = p.last_owner;
  status.failure = p.failure;
  status.position = p.from;
  if (p.follower) {
    status.position = p.follower->position();
    PartitionOwner seen = p.follower->owner();
    if (seen.term != 0 && seen.term >= status.owner.term) {
      if (seen.claim.node_id.empty() && seen.term == status.owner.term) {
        seen.claim = status.owner.claim;
      }
      status.owner = std::move(seen);
    } else if (seen.term == status.owner.term) {
      status.owner.last_record_seq = std::max(status.owner.last_record_seq, seen.last_record_seq);
    }
  }
  status.snapshot_seq = p.snapshot_seq;
  status.trimmed_below = p.trimmed_below;
  if (p.role == PartitionRole::kOwned) status.log_server = p.log_server;
  status.restoring = p.restoring || p.restore_wanted;
  status.restored_counters = p.restored_counters;
  status.restore_counters = p.restore_counters;
  status.behind_fence = p.role == PartitionRole::kFollowing && status.position.seq < p.fenced_at;
  if (p.log) {
    const PartitionLogProgress progress = p.log->progress();
    status.log_state = progress.state;
    status.appended_seq = progress.appended_seq;
    if (CommitsToStream(p.role) || p.role == PartitionRole::kLost) {
      status.position = {progress.durable_seq, p.header.term, p.header.writer};
      status.owner.last_record_seq = progress.durable_seq;
      status.durable_sent_at = progress.durable_sent_at;
    }
  }
  return status;
}

PartitionRole ClusterPersistence::role(uint32_t partition) const {
  std::lock_guard lock(mutex_);
  return partitions_[partition].role;
}

const Follower* ClusterPersistence::follower(uint32_t partition) const {
  std::lock_guard lock(mutex_);
  return partitions_[partition].follower.get();
}

const PartitionLog* ClusterPersistence::log(uint32_t partition) const {
  std::lock_guard lock(mutex_);
  const Partition& p = partitions_[partition];
  return p.role == PartitionRole::kOwned ? p.log.get() : nullptr;
}

}  // namespace tally::cluster
