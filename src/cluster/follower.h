// Follower: applies one partition's stream, in order, to what a standby (or a node catching
// up) holds — the engine's keyspace in tallyd (KeyspaceApplier), anything in tests.
//
// A follower reads the stream from the record after its position (PartitionReader, an
// ordered consumer) and, record by record:
//   a batch of the ownership in force    applied whole (clear, deletes, puts: final values)
//   parts of a group (kind 4)            buffered; applied together with the group's last
//                                        record, as one change, never part of it
//   a claim                              the partition's owner and term from here on; a
//                                        group still buffered is dropped (its writer died
//                                        before finishing it: none of it was acknowledged)
//   a renewal                            the owner is alive (its clock, for display)
//   a record of a fenced writer          skipped (OwnershipFilter)
// Its position — the last sequence applied, with the ownership in force there — moves only
// past whole records or groups, and moves inside the applier's call (BatchApplier): a
// position read while the engine's stripes are held is a consistent cut with the values.
// A restart from a saved position applies exactly what follows it; a group cut by the
// position's restart is read again whole.
//
// A follower stops for good when it cannot go on correctly: a gap (the stream no longer
// holds records after its position: trimmed below a snapshot, see lost_records()) or a
// record that does not decode. It then reports why (state() kStopped, stop_reason()).
//
// Threads: the follower reads and applies on a thread of its own; every accessor may be
// called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cluster/nats_client.h"
#include "cluster/partition_reader.h"
#include "cluster/record_codec.h"
#include "core/status.h"
#include "engine/commit_batch.h"
#include "storage/stream_position.h"

namespace tally::engine {
class Keyspace;
}  // namespace tally::engine

namespace tally::cluster {

// Where a follower stands in its partition's stream: every record up to `seq` is applied,
// and {term, writer} is the ownership in force there (OwnershipFilter). What a node saves
// with its checkpoint to follow on from after a restart; {} = the stream's start.
using FollowerPosition = storage::StreamPosition;

// Who owns the partition, as the stream says (the latest claim), for routing.
struct PartitionOwner {
  uint64_t term = 0;  // 0: no claim seen yet
  ClaimBody claim;
  uint64_t last_record_seq = 0;     // the owner's latest record (claim, batch or renewal)
  int64_t last_record_unix_ms = 0;  // the owner's clock when it wrote it (display only)
};

// What a follower applies to. Apply is called on the follower's thread, one call at a time.
class BatchApplier {
 public:
  virtual ~BatchApplier() = default;
  // Applies `batches` (one record's, or a whole group's, in stream order) to partition
  // `partition` as one change, and calls `applied` before that change becomes visible to
  // others (while the applier still holds what makes it atomic). clear_all() of a batch
  // clears the partition, not the whole store.
  virtual void Apply(uint32_t partition, std::span<const engine::CommitBatch* const> batches,
                     const std::function<void()>& applied) = 0;
};

// Applies to the engine's keyspace (Keyspace::ApplyReplicated), a partition being the slot
// range of core/slot.h. REQUIRES: `keyspace` outlives it; 0 < partition_count <=
// kMaxPartitions.
class KeyspaceApplier final : public BatchApplier {
 public:
  // Told of every group of batches applied, after the keyspace shows them (outside its
  // stripes), on the follower's thread: the derived counters keep their indexes in step.
  using Observer = std::function<void(std::span<const engine::CommitBatch* const> batches)>;

  KeyspaceApplier(engine::Keyspace& keyspace, uint32_t partition_count)
      : keyspace_(keyspace), partition_count_(partition_count) {}
  void Apply(uint32_t partition, std::span<const engine::CommitBatch* const> batches,
             const std::function<void()>& applied) override;
  // Any thread, any time.
  void SetObserver(Observer observer);

 private:
  engine::Keyspace& keyspace_;
  const uint32_t partition_count_;
  std::mutex mutex_;
  Observer observer_;  // guarded by mutex_
};

struct FollowerOptions {
  std::string stream;   // e.g. TALLY_P3
  std::string subject;  // e.g. tally.p.3
  uint32_t partition = 0;
  int64_t heartbeat_ms = 1000;  // the ordered consumer's idle heartbeat
  int64_t poll_ms = 100;        // how long one read waits (bounds how fast it stops)
};

enum class FollowerState {
  kFollowing,
  kStopped,  // final: see stop_reason()
};

// Counts since the start, for tests, INFO and metrics.
struct FollowerStats {
  uint64_t records = 0;          // records read (every kind, skipped ones included)
  uint64_t applied_records = 0;  // batches and parts applied
  uint64_t applied_groups = 0;   // Apply calls (a single batch is a group of one)
  uint64_t skipped = 0;          // records of a writer no longer in force
  uint64_t dropped_parts = 0;    // parts of groups that a claim cut short
  uint64_t claims = 0;
  uint64_t renewals = 0;
  uint64_t read_errors = 0;  // NATS errors while reading (retried)
};

class Follower {
 public:
  // Follows options.stream from the record after `from`. kCorruption when the stream ends
  // before from.seq (it lost records this node had applied). REQUIRES: `connection` and
  // `applier` outlive the follower.
  static Result<std::unique_ptr<Follower>> Start(NatsConnection& connection,
                                                 FollowerOptions options, FollowerPosition from,
                                                 BatchApplier& applier);

  // Stops reading (within about poll_ms); a group still buffered is not applied.
  ~Follower();
  // The same, keeping the accessors: position() no longer moves afterwards. Idempotent.
  void Stop();
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  FollowerPosition position() const;
  FollowerState state() const;
  // Why the follower stopped (kStopped); OkStatus while it follows.
  Status stop_reason() const;
  // Stopped at a gap: the stream no longer holds the records after its position (a node
  // then restores the partition from a snapshot).
  bool lost_records() const;
  PartitionOwner owner() const;
  FollowerStats stats() const;
  // Records buffered of a group not yet complete.
  size_t pending_parts() const;

  // Waits until position().seq >= seq or the follower stopped, at most `timeout`; returns
  // the position then.
  FollowerPosition WaitApplied(uint64_t seq, std::chrono::milliseconds timeout) const;

 private:
  Follower(FollowerOptions options, std::unique_ptr<PartitionReader> reader, FollowerPosition from,
           BatchApplier& applier);

  void Run();
  // Each takes one entry in stream order, on the follower's thread.
  void OnRecord(LogEntry& entry);
  void ApplyGroup(LogEntry& last);
  // Moves the position to `seq` (the ownership stays). REQUIRES: mutex_ held.
  void Advance(uint64_t seq);
  void Halt(Error reason);

  const FollowerOptions options_;
  std::unique_ptr<PartitionReader> reader_;  // the follower's thread only
  BatchApplier& applier_;
  std::vector<LogEntry> parts_;       // the follower's thread only: a group being read
  uint64_t last_skipped_writer_ = 0;  // the follower's thread only: the last one warned of

  mutable std::mutex mutex_;
  mutable std::condition_variable advanced_;
  // Guarded by mutex_:
  FollowerPosition position_;
  FollowerState state_ = FollowerState::kFollowing;
  Status stop_reason_ = OkStatus();
  bool lost_records_ = false;
  PartitionOwner owner_;
  FollowerStats stats_;
  size_t pending_parts_ = 0;
  bool stopping_ = false;

  std::thread thread_;
};

}  // namespace tally::cluster
