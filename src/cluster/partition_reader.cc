#include "cluster/partition_reader.h"

#include <utility>

namespace tally::cluster {

Result<std::unique_ptr<PartitionReader>> PartitionReader::Open(
    NatsConnection& connection, const std::string& stream, const std::string& subject,
    uint64_t from_seq, OwnershipFilter ownership, int64_t heartbeat_ms) {
  if (from_seq == 0) return InvalidArgument("partition reader: sequences start at 1");
  auto state = connection.GetStreamState(stream);
  if (!state) return tl::unexpected(state.error().ToError());
  if (state->last_seq + 1 < from_seq) {
    const std::string ends = "stream " + stream + " ends at " + std::to_string(state->last_seq) +
                             ", before sequence " + std::to_string(from_seq - 1) +
                             " that this reader has already read";
    if (state->leaderless) {
      // Answered by a replica while the stream has no leader (nats-server 2.9 does, from its
      // own state): a replica behind the others. Seen after two of three servers were killed.
      return MakeError(ErrorCode::kUnavailable,
                       ends + " (answered while the stream has no leader: asking again later)");
    }
    return Corruption(ends);
  }
  // The first sequence the stream still holds (an emptied stream holds none below its end).
  const uint64_t first_held = state->messages == 0 ? state->last_seq + 1 : state->first_seq;
  if (first_held > from_seq && state->leaderless) {
    // A replica catching up may hold less of the stream's front than the stream does: a
    // gap it shows is no reason to give up what this reader applied.
    return MakeError(ErrorCode::kUnavailable,
                     "stream " + stream + " begins at " + std::to_string(first_held) +
                         " by a replica's answer while the stream has no leader: asking again "
                         "later");
  }
  auto consumer = OrderedConsumer::Start(connection, stream, subject, from_seq, heartbeat_ms);
  if (!consumer) return tl::unexpected(consumer.error().ToError());
  std::unique_ptr<PartitionReader> reader(
      new PartitionReader(std::move(*consumer), stream, from_seq, ownership));
  if (first_held > from_seq) reader->gap_end_ = first_held;
  return reader;
}

Result<std::optional<LogEntry>> PartitionReader::Next(std::chrono::milliseconds wait) {
  if (gap_end_ > next_seq_ || (held_.has_value() && held_->seq > next_seq_)) {
    LogEntry gap;
    gap.kind = LogEntry::Kind::kGap;
    gap.seq = next_seq_;
    gap.gap_end = gap_end_ > next_seq_ ? gap_end_ : held_->seq;
    next_seq_ = gap.gap_end;
    gap_end_ = 0;
    return std::optional<LogEntry>(std::move(gap));
  }
  if (held_.has_value()) {
    StoredMessage message = std::move(*held_);
    held_.reset();
    auto entry = Decode(std::move(message));
    if (!entry) return tl::unexpected(entry.error());
    return std::optional<LogEntry>(std::move(*entry));
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto message = consumer_->Next(std::max<int64_t>(left.count(), 0));
    if (!message) return tl::unexpected(message.error().ToError());
    if (!message->has_value()) return std::optional<LogEntry>();
    if ((*message)->seq < next_seq_) continue;  // delivered again after a consumer reset
    if ((*message)->seq > next_seq_) {
      held_ = std::move(**message);
      return Next(wait);  // reports the gap first
    }
    auto entry = Decode(std::move(**message));
    if (!entry) return tl::unexpected(entry.error());
    return std::optional<LogEntry>(std::move(*entry));
  }
}

Result<LogEntry> PartitionReader::Decode(StoredMessage message) {
  next_seq_ = message.seq + 1;
  auto record = DecodeRecord(message.data);
  if (!record) {
    return Corruption("stream " + stream_ + " sequence " + std::to_string(message.seq) + ": " +
                      record.error().message);
  }
  LogEntry entry;
  entry.kind = LogEntry::Kind::kRecord;
  entry.seq = message.seq;
  entry.msg_id = std::move(message.msg_id);
  entry.record = std::move(*record);
  entry.counts = ownership_.Accept(entry.seq, entry.record);
  return entry;
}

}  // namespace tally::cluster
