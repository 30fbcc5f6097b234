// PartitionReader: reads a partition's stream in order from a sequence and decodes each
// record — how a standby follows an owner, and how a node catches up.
//
// It reads with an ordered consumer (nats_client.h), which JetStream starts at the first
// sequence the stream still holds when asked for a purged one, without saying so. The
// reader compares every delivered sequence with the one it expects and reports the
// missing range as a gap (at the start, by the stream's first sequence; later, by a jump
// in the delivered sequences): a reader that sees a gap has missed records and must not
// apply what follows as if it had not (issue 14 brings snapshots for that case).
//
// Not thread-safe: one reader per instance.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cluster/nats_client.h"
#include "cluster/record_codec.h"
#include "core/status.h"

namespace tally::cluster {

// One step of a partition's stream.
struct LogEntry {
  enum class Kind {
    kRecord,  // a record, decoded
    kGap,     // the stream no longer holds [seq, gap_end): purged before it was read
  };
  Kind kind = Kind::kRecord;
  uint64_t seq = 0;      // the record's sequence, or the first one missing
  uint64_t gap_end = 0;  // kGap: the sequence reading goes on from
  std::string msg_id;    // kRecord: its Nats-Msg-Id
  Record record;         // kRecord
  // kRecord: false for a record that is not of the ownership in force at its place
  // (OwnershipFilter); such a record must be skipped.
  bool counts = false;
};

class PartitionReader {
 public:
  // Reads `stream` (subject `subject`) from `from_seq` (>= 1) on. `ownership` is the
  // ownership in force at from_seq - 1 ({} when reading from the stream's start). A stream
  // that ends before from_seq - 1 (it lost records this reader had, or was recreated) is
  // refused with kCorruption — unless the stream has no leader: then the answer came from a
  // replica that may be behind, and it is kUnavailable (ask again); so is a stream that
  // begins after from_seq by such an answer (a gap only the leader's answer can show).
  static Result<std::unique_ptr<PartitionReader>> Open(
      NatsConnection& connection, const std::string& stream, const std::string& subject,
      uint64_t from_seq, OwnershipFilter ownership = {}, int64_t heartbeat_ms = 1000);

  // The next entry in stream order; nullopt when nothing arrived within `wait`. A gap is
  // reported once, before the record after it. A record that does not decode is an error
  // (kCorruption, naming its sequence), after which reading goes on past it.
  Result<std::optional<LogEntry>> Next(std::chrono::milliseconds wait);

  // The sequence this reader will deliver next.
  uint64_t next_seq() const { return next_seq_; }
  const OwnershipFilter& ownership() const { return ownership_; }

 private:
  PartitionReader(std::unique_ptr<OrderedConsumer> consumer, std::string stream, uint64_t next_seq,
                  OwnershipFilter ownership)
      : consumer_(std::move(consumer)),
        stream_(std::move(stream)),
        next_seq_(next_seq),
        ownership_(ownership) {}

  Result<LogEntry> Decode(StoredMessage message);

  std::unique_ptr<OrderedConsumer> consumer_;
  const std::string stream_;
  uint64_t next_seq_;
  OwnershipFilter ownership_;
  uint64_t gap_end_ = 0;               // a gap found at Open, not reported yet
  std::optional<StoredMessage> held_;  // delivered after a gap, returned next
};

}  // namespace tally::cluster
