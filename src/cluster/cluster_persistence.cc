#include "cluster/cluster_persistence.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Waits until `seq` of `log` is durable; an error once the log is fenced, or (with a
// deadline) when the deadline passes first.
Status WaitDurable(PartitionLog& log, uint64_t seq, std::optional<Clock::time_point> deadline) {
  while (true) {
    const PartitionLogProgress progress = log.WaitDurable(seq, std::chrono::milliseconds(1000));
    if (progress.durable_seq >= seq) return OkStatus();
    if (progress.state == PartitionLogState::kFenced) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("fenced: another writer took the stream at sequence {}",
                                   log.fence() ? log.fence()->seq : seq));
    }
    if (deadline && Clock::now() >= *deadline) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("record {} not durable in time ({})", seq,
                                   PartitionLogStateName(progress.state)));
    }
  }
}

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
      owned_(options_.partition_count),
      followers_(options_.partition_count),
      cut_(options_.partition_count) {}

ClusterPersistence::~ClusterPersistence() { Close(); }

void ClusterPersistence::Close() {
  for (auto& follower : followers_) follower.reset();
  for (Owned& owned : owned_) owned.log.reset();
}

void ClusterPersistence::Attach(engine::Keyspace& keyspace) {
  applier_ = std::make_unique<KeyspaceApplier>(keyspace, options_.partition_count);
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
    // A checkpoint cut short: its owned partitions may hold values their streams never got.
    for (uint32_t p : **open) {
      spdlog::warn("partition {}: a checkpoint did not finish; rebuilding it from its stream", p);
      if (auto status = tables_->RebuildPartition(p); !status) return status;
    }
    if (auto status = tables_->CloseOpenCheckpoint(); !status) return status;
  }
  if (auto status = tables_->LoadCounters(visitor); !status) return status;
  auto positions = tables_->ReadPositions();
  if (!positions) return tl::unexpected(positions.error());
  for (uint32_t p : options_.owned) {
    if (auto status = CatchUpAndClaim(p, (*positions)[p]); !status) return status;
  }
  for (uint32_t p = 0; p < options_.partition_count; ++p) {
    if (owned_[p].log) continue;
    auto follower = Follower::Start(connection_, FollowerOptionsFor(p), (*positions)[p], *applier_);
    if (!follower) return tl::unexpected(follower.error());
    followers_[p] = std::move(*follower);
  }
  return OkStatus();
}

Status ClusterPersistence::CatchUpAndClaim(uint32_t partition, storage::StreamPosition from) {
  const std::string stream = PartitionStream(options_, partition);
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.catch_up_timeout_ms);
  // A stream without a leader (just created, or electing one) does not answer: ask again.
  auto state = connection_.GetStreamState(stream);
  while (!state && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    state = connection_.GetStreamState(stream);
  }
  if (!state) return tl::unexpected(state.error().ToError());
  const uint64_t tail = state->last_seq;
  auto follower = Follower::Start(connection_, FollowerOptionsFor(partition), from, *applier_);
  if (!follower) return tl::unexpected(follower.error());
  // Everything up to the tail read: applied, or buffered as a group the tail cuts short
  // (its writer died before its last record, so none of it was acknowledged; the claim
  // below ends it for every reader).
  FollowerPosition caught_up = (*follower)->position();
  while (caught_up.seq + (*follower)->pending_parts() < tail) {
    if ((*follower)->state() == FollowerState::kStopped) return (*follower)->stop_reason();
    if (Clock::now() >= deadline) {
      return MakeError(
          ErrorCode::kUnavailable,
          fmt::format("partition {}: read up to {} of {} in time", partition, caught_up.seq, tail));
    }
    caught_up = (*follower)->WaitApplied(tail, std::chrono::milliseconds(100));
  }
  caught_up = (*follower)->position();
  follower->reset();

  Owned& owned = owned_[partition];
  owned.header.partition = partition;
  owned.header.term = tail + 1;
  owned.header.writer = NewWriterId();
  PartitionLogOptions log_options;
  log_options.stream = stream;
  log_options.subject = PartitionSubject(options_, partition);
  log_options.partition = partition;
  log_options.max_in_flight = options_.max_in_flight;
  log_options.publish_timeout_ms = options_.publish_timeout_ms;
  log_options.max_record_bytes = options_.max_record_bytes;
  auto log = PartitionLog::Start(connection_, log_options, tail, owned.header.writer);
  if (!log) return tl::unexpected(log.error());
  ClaimBody claim;
  claim.node_name = options_.node_name;
  claim.node_id = tables_->node_id();
  claim.caught_up_to = tail;
  claim.previous_term = caught_up.term;
  owned.header.owner_unix_ms = UnixMs();
  std::string bytes;
  EncodeClaim(owned.header, claim, &bytes);
  auto seq = (*log)->Append(RecordKind::kClaim, std::move(bytes));
  if (!seq) return tl::unexpected(seq.error());
  if (auto status = WaitDurable(**log, *seq, deadline); !status) return status;
  owned.log = std::move(*log);
  std::lock_guard lock(cut_mutex_);
  cut_[partition] = {*seq, owned.header.term, owned.header.writer};
  spdlog::info("partition {}: claimed at sequence {} (caught up from {})", partition, *seq,
               from.seq);
  return OkStatus();
}

Result<uint64_t> ClusterPersistence::AppendShare(Owned& owned, const engine::CommitBatch& batch,
                                                 const BatchShare& share) {
  EncodeBatch(owned.header, batch, share, &encoded_);
  if (encoded_.size() <= options_.max_record_bytes) {
    return owned.log->Append(RecordKind::kBatch, std::move(encoded_));
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
      EncodeBatch(owned.header, batch, split[i], &bytes,
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
    seq = owned.log->Append(i + 1 == records.size() ? RecordKind::kBatch : RecordKind::kPart,
                            std::move(records[i]));
    if (!seq) return seq;
  }
  return seq;
}

Status ClusterPersistence::Commit(const engine::CommitBatch& batch, [[maybe_unused]] bool sync) {
  const std::vector<BatchShare> shares = SplitBatch(batch, options_.partition_count);
  std::vector<std::pair<uint32_t, uint64_t>> appended;  // partition, its last sequence
  for (uint32_t p : options_.owned) {
    if (shares[p].empty()) continue;
    Owned& owned = owned_[p];
    if (!owned.log) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("partition {}: not writing", p));
    }
    owned.header.epoch = batch.epoch();
    owned.header.owner_unix_ms = UnixMs();
    auto seq = AppendShare(owned, batch, shares[p]);
    if (!seq) {
      return MakeError(seq.error().code, fmt::format("partition {}: {}", p, seq.error().message));
    }
    appended.emplace_back(p, *seq);
  }
  // Durable once in every stream it went to; a stalled stream keeps the commit waiting
  // (its replies held), as a slow fsync would.
  for (const auto& [p, seq] : appended) {
    if (auto status = WaitDurable(*owned_[p].log, seq, std::nullopt); !status) {
      return MakeError(status.error().code,
                       fmt::format("partition {}: {}", p, status.error().message));
    }
  }
  return OkStatus();
}

Result<uint64_t> ClusterPersistence::BeginCheckpoint() {
  if (auto status = tables_->BeginCheckpoint(options_.owned); !status) {
    return tl::unexpected(status.error());
  }
  return next_token_++;
}

void ClusterPersistence::CheckpointCut(uint64_t token) {
  std::lock_guard lock(cut_mutex_);
  cut_token_ = token;
  for (uint32_t p = 0; p < options_.partition_count; ++p) {
    if (owned_[p].log) {
      cut_[p] = {owned_[p].log->progress().appended_seq, owned_[p].header.term,
                 owned_[p].header.writer};
    } else if (followers_[p]) {
      cut_[p] = followers_[p]->position();
    }
  }
}

Status ClusterPersistence::CheckpointWrite(const engine::CommitBatch& batch) {
  return tables_->CheckpointWrite(batch);
}

Status ClusterPersistence::FinishCheckpoint(uint64_t token) {
  std::vector<storage::StreamPosition> positions;
  {
    std::lock_guard lock(cut_mutex_);
    if (cut_token_ != token) {
      return MakeError(ErrorCode::kInternal,
                       fmt::format("checkpoint {} finished without its cut", token));
    }
    positions = cut_;
  }
  return tables_->FinishCheckpoint(positions);
}

engine::PersistenceStats ClusterPersistence::stats() const {
  engine::PersistenceStats stats;
  stats.disk_bytes = tables_->disk_bytes();
  return stats;
}

Status ClusterPersistence::WriteCatalog(std::span<const CatalogOp> ops) {
  return tables_->WriteCatalog(ops);
}

Result<std::vector<std::pair<std::string, std::string>>> ClusterPersistence::ReadCatalog() {
  return tables_->ReadCatalog();
}

const Follower* ClusterPersistence::follower(uint32_t partition) const {
  return followers_[partition].get();
}

const PartitionLog* ClusterPersistence::log(uint32_t partition) const {
  return owned_[partition].log.get();
}

}  // namespace tally::cluster
