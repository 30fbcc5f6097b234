// PartitionLog: the one writer of a partition's stream. The owner appends encoded records
// (record_codec.h); the log publishes them in order, several in flight, and says which are
// durable — in the stream on a quorum of its replicas — or that the partition was taken
// over (fenced).
//
// The chain. A writer starts at the stream's tail L as it knows it (after catching up, the
// tail its claim expects). Record n of the writer lands at L + n or nowhere: it is
// published with
//   Nats-Msg-Id                  <partition>.<writer as 16 hex>.<sequence>, unique forever
//   Nats-Expected-Last-Sequence  its sequence - 1 (written by hand, 0 included)
//   Nats-Expected-Last-Msg-Id    its predecessor's Msg-Id, when the predecessor was not yet
//                                durable at the time of sending
// JetStream checks these on every replica when it applies the message, de-duplication
// first. The first two make a record land only right after the tail its writer expects;
// the third makes a record sent behind one still in flight land only right after that
// very record — without it, when a new owner's claim took the place of a refused record,
// the records behind the refused one would find the tail they expect and land after the
// claim (verified against nats-server 2.9.10, see partition_log_test.cc).
//
// Outcomes (issue 13's design, "what an acknowledgement means"). Only the oldest record not
// yet durable (the head) is acted on; a later record's failure waits until it is the head.
//   PubAck at the expected sequence, fresh or duplicate  durable
//   timeout                        unknown: it may land later. Resend the head and every
//                                  record after it, in order, same ids and expectations
//                                  (a copy that landed answers "duplicate")
//   no responders, other errors    not stored: resend from the head after retry_delay_ms
//                                  (doubling up to 1 s while the head keeps failing)
//   wrong last sequence / Msg-Id   (10071 / 10070) read the stream at the head's sequence:
//                                  this writer's record there = durable; another record
//                                  there = fenced; nothing there = resend from the head
// A PubAck at another sequence or from another stream is resolved the same way as 10071.
// Fenced is final: no record of this writer will ever land after the one refused, and
// none of the records not yet durable is (Append fails from then on).
//
// Threads: Append, the accessors and WaitDurable may be called from any thread. The log
// publishes on a thread of its own, which also calls on_progress.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "cluster/nats_client.h"
#include "cluster/record_codec.h"
#include "core/status.h"

namespace tally::cluster {

struct PartitionLogOptions {
  std::string stream;   // e.g. TALLY_P3
  std::string subject;  // e.g. tally.p.3
  uint32_t partition = 0;
  size_t max_in_flight = 4;           // records sent and not yet durable
  int64_t publish_timeout_ms = 2000;  // MaxWait of each publish
  int64_t retry_delay_ms = 50;        // before resending after a refusal or a lookup failure
  int64_t stall_after_ms = 1000;      // the head waiting this long makes the log kStalled
  size_t max_record_bytes = 256 * 1024;
  // Tests: called on the log's thread, with its lock released, right after each send (a
  // pause there lets the send's outcome arrive while the log is not waiting for it).
  std::function<void()> after_send;
};

enum class PartitionLogState {
  kWriting,  // records flow
  kStalled,  // the head has waited longer than stall_after_ms (no quorum, no leader ...)
  kFenced,   // another writer took the stream: final
};
std::string_view PartitionLogStateName(PartitionLogState state);

struct PartitionLogProgress {
  PartitionLogState state = PartitionLogState::kWriting;
  uint64_t durable_seq = 0;   // every record of this writer up to here is in the stream
  uint64_t appended_seq = 0;  // the sequence of the last record appended
  // When the record at durable_seq was first sent (this process's steady clock); the epoch
  // (time_point{}) while none of this writer's records is durable. No other node can have
  // seen the stream without it, hence without this writer's ownership, before then: the
  // owner's read lease counts from here (Coordinator).
  std::chrono::steady_clock::time_point durable_sent_at;
};

// Where the log was fenced: the first of its records that can never land, and the Msg-Id
// of the record the stream holds at that sequence instead.
struct FenceInfo {
  uint64_t seq = 0;
  std::string found_msg_id;
};

// Counts since the start, for tests, INFO and metrics.
struct PartitionLogStats {
  uint64_t appended = 0;
  uint64_t durable = 0;
  uint64_t duplicates = 0;       // durable through a "duplicate" PubAck
  uint64_t found_by_lookup = 0;  // durable through reading the stream after 10071/10070
  uint64_t sends = 0;            // publishes sent, resends included
  uint64_t resend_rounds = 0;    // times the log went back to its head
  uint64_t timeouts = 0;         // failed sends by kind (superseded sends included)
  uint64_t no_responders = 0;
  uint64_t wrong_last = 0;  // 10071 and 10070
  uint64_t other_failures = 0;
  uint64_t send_failures = 0;   // publishes nats.c refused to send
  int64_t longest_wait_ms = 0;  // longest time from a record's first send to durable
  // Records the log thread found durable only when it woke up on its timer: their outcome's
  // wake-up was lost, and their replies waited up to a second. Stays 0 (see wakeups_).
  uint64_t late_durable = 0;
};

// A random, non-zero writer number for a new claim (RecordHeader::writer).
uint64_t NewWriterId();

class PartitionLog {
 public:
  using ProgressCallback = std::function<void(const PartitionLogProgress&)>;

  // Starts a writer whose first record will land at `last_seq` + 1 (`last_seq` = 0 for an
  // empty stream). `writer` is the number in its records' headers. `on_progress`, when set,
  // is called on the log's thread whenever durable_seq or the state changes.
  // REQUIRES: `connection` outlives the log; writer != 0.
  static Result<std::unique_ptr<PartitionLog>> Start(NatsConnection& connection,
                                                     PartitionLogOptions options, uint64_t last_seq,
                                                     uint64_t writer,
                                                     ProgressCallback on_progress = nullptr);

  // Stops publishing; waits for the outcomes of publishes in flight (at most about
  // publish_timeout_ms). Records not yet durable stay unknown: they may still land.
  ~PartitionLog();
  PartitionLog(const PartitionLog&) = delete;
  PartitionLog& operator=(const PartitionLog&) = delete;

  // Queues one encoded record and returns the sequence it will land at.
  // kInvalidArgument when it is larger than max_record_bytes, kUnavailable once fenced.
  Result<uint64_t> Append(RecordKind kind, std::string record);

  // Waits until `seq` is durable or the log is fenced, at most `timeout`.
  PartitionLogProgress WaitDurable(uint64_t seq, std::chrono::milliseconds timeout);

  PartitionLogProgress progress() const;
  PartitionLogStats stats() const;
  std::optional<FenceInfo> fence() const;
  uint64_t writer() const { return writer_; }
  // The Nats-Msg-Id record `seq` is published with.
  std::string MessageId(uint64_t seq) const;

 private:
  // Where a record stands. kFailed holds the failure of its current send.
  enum class EntryState { kQueued, kSent, kFailed, kDurable };
  enum class Failure { kRetry, kResendNow, kLookup };

  struct Entry {
    uint64_t seq = 0;
    RecordKind kind = RecordKind::kBatch;
    std::string bytes;
    EntryState state = EntryState::kQueued;
    Failure failure = Failure::kRetry;
    uint64_t attempt = 0;                            // the tag of its current send
    int failures = 0;                                // failed sends so far (for the retry delay)
    std::chrono::steady_clock::time_point retry_at;  // kFailed: act on it from then on
    std::chrono::steady_clock::time_point first_sent;
    bool ever_sent = false;
  };

  PartitionLog(NatsConnection& connection, PartitionLogOptions options, uint64_t last_seq,
               uint64_t writer, ProgressCallback on_progress);

  void Run();
  // Each of these runs on the log's thread with mutex_ held (the lock is passed in when
  // it may be released for a NATS call).
  size_t PopDurable();  // returns how many it popped
  void HandleHeadFailure(std::unique_lock<std::mutex>& lock);
  void ResendFromHead();
  void SendWindow(std::unique_lock<std::mutex>& lock);
  void UpdateStall();
  void MarkDurable(Entry& entry, bool duplicate);
  void Fence(uint64_t seq, std::string found_msg_id);
  std::chrono::milliseconds RetryDelay(int failures) const;
  // Called by the publisher (a nats.c thread) with the outcome of one send.
  void OnOutcome(uint64_t attempt, NatsResult<PubAck> outcome);
  Entry* Find(uint64_t seq);
  PartitionLogProgress ProgressLocked() const;
  // Tells Run that something changed (see wakeups_). REQUIRES: mutex_ held.
  void Wake();

  NatsConnection& connection_;
  const PartitionLogOptions options_;
  const uint64_t writer_;
  const std::string id_prefix_;  // "<partition>.<writer hex>."
  const ProgressCallback on_progress_;
  std::unique_ptr<AsyncPublisher> publisher_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;     // outcomes, appends, stop: see Wake()
  std::condition_variable durable_cv_;  // durable_seq_ or state_ changed
  // Guarded by mutex_:
  std::deque<Entry> entries_;  // every record not yet popped as durable, in order
  size_t sent_ = 0;            // entries_[0, sent_) have a current send
  std::unordered_map<uint64_t, uint64_t> attempts_;  // outstanding send tag -> sequence
  uint64_t next_attempt_ = 0;
  uint64_t durable_seq_;
  std::chrono::steady_clock::time_point durable_sent_at_;
  uint64_t appended_seq_;
  PartitionLogState state_ = PartitionLogState::kWriting;
  // Counts Wake()s. Run lets go of the lock while it publishes and reports progress; an
  // outcome that arrives then (a PubAck can come before the publish call returns) found no
  // one waiting. Run waits only while this count is what it was when it last looked at the
  // entries, so such a wake-up is not lost (lost, it left the durable record unnoticed and
  // every reply behind it waiting until the next timed wake-up, up to a second).
  uint64_t wakeups_ = 0;
  std::optional<FenceInfo> fence_;
  PartitionLogStats stats_;
  bool stopping_ = false;

  std::thread thread_;
};

}  // namespace tally::cluster
