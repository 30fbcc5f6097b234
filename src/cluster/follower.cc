#include "cluster/follower.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "core/slot.h"
#include "core/thread_name.h"
#include "engine/keyspace.h"

namespace tally::cluster {

void KeyspaceApplier::Apply(uint32_t partition, std::span<const engine::CommitBatch* const> batches,
                            const std::function<void()>& applied) {
  keyspace_.ApplyReplicated(PartitionSlots(partition, partition_count_), batches, applied);
  Observer observer;
  {
    std::lock_guard lock(mutex_);
    observer = observer_;
  }
  if (observer) observer(batches);
}

void KeyspaceApplier::SetObserver(Observer observer) {
  std::lock_guard lock(mutex_);
  observer_ = std::move(observer);
}

Result<std::unique_ptr<Follower>> Follower::Start(NatsConnection& connection,
                                                  FollowerOptions options, FollowerPosition from,
                                                  BatchApplier& applier) {
  auto reader =
      PartitionReader::Open(connection, options.stream, options.subject, from.seq + 1,
                            OwnershipFilter(from.term, from.writer), options.heartbeat_ms);
  if (!reader) return tl::unexpected(reader.error());
  std::unique_ptr<Follower> follower(
      new Follower(std::move(options), std::move(*reader), from, applier));
  Follower* self = follower.get();
  follower->thread_ =
      NamedThread("follow p" + std::to_string(self->options_.partition), [self] { self->Run(); });
  return follower;
}

Follower::Follower(FollowerOptions options, std::unique_ptr<PartitionReader> reader,
                   FollowerPosition from, BatchApplier& applier)
    : options_(std::move(options)), reader_(std::move(reader)), applier_(applier), position_(from) {
  owner_.term = from.term;
}

Follower::~Follower() { Stop(); }

void Follower::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  advanced_.notify_all();
  if (thread_.joinable()) thread_.join();
}

FollowerPosition Follower::position() const {
  std::lock_guard lock(mutex_);
  return position_;
}

FollowerState Follower::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

bool Follower::lost_records() const {
  std::lock_guard lock(mutex_);
  return lost_records_;
}

Status Follower::stop_reason() const {
  std::lock_guard lock(mutex_);
  return stop_reason_;
}

PartitionOwner Follower::owner() const {
  std::lock_guard lock(mutex_);
  return owner_;
}

FollowerStats Follower::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

size_t Follower::pending_parts() const {
  std::lock_guard lock(mutex_);
  return pending_parts_;
}

FollowerPosition Follower::WaitApplied(uint64_t seq, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  advanced_.wait_for(lock, timeout, [&] {
    return position_.seq >= seq || state_ == FollowerState::kStopped || stopping_;
  });
  return position_;
}

void Follower::Run() {
  const std::chrono::milliseconds poll(options_.poll_ms);
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || state_ == FollowerState::kStopped) return;
    }
    auto next = reader_->Next(poll);
    if (!next) {
      // A record that does not decode cannot be applied, nor skipped without losing what
      // it held; anything else is NATS trouble that the ordered consumer recovers from.
      if (next.error().code == ErrorCode::kCorruption) return Halt(next.error());
      std::unique_lock lock(mutex_);
      ++stats_.read_errors;
      advanced_.wait_for(lock, poll, [&] { return stopping_; });
      continue;
    }
    if (!next->has_value()) continue;
    LogEntry& entry = **next;
    if (entry.kind == LogEntry::Kind::kGap) {
      {
        std::lock_guard lock(mutex_);
        lost_records_ = true;
      }
      return Halt(Error{ErrorCode::kCorruption,
                        "partition " + std::to_string(options_.partition) + ": stream " +
                            options_.stream + " no longer holds sequences " +
                            std::to_string(entry.seq) + " to " + std::to_string(entry.gap_end - 1) +
                            " (purged before this node applied them)"});
    }
    if (entry.record.header.partition != options_.partition) {
      return Halt(Error{ErrorCode::kCorruption, "stream " + options_.stream + " sequence " +
                                                    std::to_string(entry.seq) +
                                                    " holds a record of partition " +
                                                    std::to_string(entry.record.header.partition)});
    }
    OnRecord(entry);
  }
}

void Follower::OnRecord(LogEntry& entry) {
  if (!entry.counts) {
    // The writers' fencing (partition_log.h) keeps such records out of a stream: one read
    // here says this reader's view of the stream differs from the one its writers saw.
    // Said once per writer, so that a run of them is one line.
    if (entry.record.header.writer != last_skipped_writer_) {
      last_skipped_writer_ = entry.record.header.writer;
      spdlog::warn(
          "partition {}: record {} (term {}, writer {:016x}) is not of the ownership in force "
          "(term {}, writer {:016x}): skipped",
          options_.partition, entry.seq, entry.record.header.term, entry.record.header.writer,
          reader_->ownership().term(), reader_->ownership().writer());
    }
    std::lock_guard lock(mutex_);
    ++stats_.records;
    ++stats_.skipped;
    if (parts_.empty()) Advance(entry.seq);
    return;
  }
  switch (entry.record.kind) {
    case RecordKind::kPart: {
      parts_.push_back(std::move(entry));
      const LogEntry& part = parts_.back();
      std::lock_guard lock(mutex_);
      ++stats_.records;
      pending_parts_ = parts_.size();
      owner_.last_record_seq = part.seq;
      owner_.last_record_unix_ms = part.record.header.owner_unix_ms;
      return;
    }
    case RecordKind::kBatch:
      return ApplyGroup(entry);
    case RecordKind::kClaim: {
      const size_t dropped = parts_.size();
      parts_.clear();
      std::lock_guard lock(mutex_);
      ++stats_.records;
      ++stats_.claims;
      stats_.dropped_parts += dropped;
      pending_parts_ = 0;
      owner_.term = entry.seq;
      owner_.claim = std::move(entry.record.claim);
      owner_.last_record_seq = entry.seq;
      owner_.last_record_unix_ms = entry.record.header.owner_unix_ms;
      position_ = FollowerPosition{entry.seq, entry.record.header.term, entry.record.header.writer};
      advanced_.notify_all();
      return;
    }
    case RecordKind::kRenew: {
      std::lock_guard lock(mutex_);
      ++stats_.records;
      ++stats_.renewals;
      owner_.last_record_seq = entry.seq;
      owner_.last_record_unix_ms = entry.record.header.owner_unix_ms;
      if (parts_.empty()) Advance(entry.seq);
      return;
    }
  }
}

void Follower::ApplyGroup(LogEntry& last) {
  std::vector<const engine::CommitBatch*> batches;
  batches.reserve(parts_.size() + 1);
  for (const LogEntry& part : parts_) batches.push_back(&part.record.batch);
  batches.push_back(&last.record.batch);
  applier_.Apply(options_.partition, batches, [&] {
    std::lock_guard lock(mutex_);
    ++stats_.records;
    stats_.applied_records += batches.size();
    ++stats_.applied_groups;
    pending_parts_ = 0;
    owner_.last_record_seq = last.seq;
    owner_.last_record_unix_ms = last.record.header.owner_unix_ms;
    Advance(last.seq);
  });
  parts_.clear();
}

void Follower::Advance(uint64_t seq) {
  position_.seq = seq;
  advanced_.notify_all();
}

void Follower::Halt(Error reason) {
  std::lock_guard lock(mutex_);
  state_ = FollowerState::kStopped;
  stop_reason_ = tl::unexpected(std::move(reason));
  advanced_.notify_all();
}

}  // namespace tally::cluster
