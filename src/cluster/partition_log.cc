#include "cluster/partition_log.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <span>
#include <utility>

#include "core/thread_name.h"

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kMaxRetryDelay{1000};
// The log's thread wakes at least this often (to notice a head turning stalled).
constexpr std::chrono::milliseconds kIdleWake{1000};

int64_t ElapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

}  // namespace

std::string_view PartitionLogStateName(PartitionLogState state) {
  switch (state) {
    case PartitionLogState::kWriting:
      return "writing";
    case PartitionLogState::kStalled:
      return "stalled";
    case PartitionLogState::kFenced:
      return "fenced";
  }
  return "unknown";
}

uint64_t NewWriterId() {
  std::random_device device;
  std::mt19937_64 generator((uint64_t{device()} << 32) ^ device());
  uint64_t writer = 0;
  while (writer == 0) writer = generator();
  return writer;
}

Result<std::unique_ptr<PartitionLog>> PartitionLog::Start(NatsConnection& connection,
                                                          PartitionLogOptions options,
                                                          uint64_t last_seq, uint64_t writer,
                                                          ProgressCallback on_progress) {
  if (writer == 0) return InvalidArgument("partition log: the writer number must not be 0");
  if (options.max_in_flight == 0 || options.publish_timeout_ms <= 0) {
    return InvalidArgument("partition log: max_in_flight and publish_timeout_ms must be > 0");
  }
  std::unique_ptr<PartitionLog> log(
      new PartitionLog(connection, std::move(options), last_seq, writer, std::move(on_progress)));
  PartitionLog* self = log.get();
  auto publisher =
      AsyncPublisher::Create(connection, [self](uint64_t tag, NatsResult<PubAck> outcome) {
        self->OnOutcome(tag, std::move(outcome));
      });
  if (!publisher) return tl::unexpected(publisher.error().ToError());
  log->publisher_ = std::move(*publisher);
  log->thread_ =
      NamedThread("log p" + std::to_string(self->options_.partition), [self] { self->Run(); });
  return log;
}

PartitionLog::PartitionLog(NatsConnection& connection, PartitionLogOptions options,
                           uint64_t last_seq, uint64_t writer, ProgressCallback on_progress)
    : connection_(connection),
      options_(std::move(options)),
      writer_(writer),
      id_prefix_([&] {
        char prefix[48];
        std::snprintf(prefix, sizeof prefix, "%" PRIu32 ".%016" PRIx64 ".", options_.partition,
                      writer);
        return std::string(prefix);
      }()),
      on_progress_(std::move(on_progress)),
      durable_seq_(last_seq),
      appended_seq_(last_seq) {}

PartitionLog::~PartitionLog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    Wake();
  }
  durable_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  publisher_.reset();  // waits for the outcomes still due, which call OnOutcome
}

std::string PartitionLog::MessageId(uint64_t seq) const { return id_prefix_ + std::to_string(seq); }

Result<uint64_t> PartitionLog::Append(RecordKind kind, std::string record) {
  if (record.size() > options_.max_record_bytes) {
    return InvalidArgument("partition " + std::to_string(options_.partition) + ": a record of " +
                           std::to_string(record.size()) + " bytes is larger than the limit of " +
                           std::to_string(options_.max_record_bytes));
  }
  std::lock_guard lock(mutex_);
  if (state_ == PartitionLogState::kFenced || stopping_) {
    return MakeError(ErrorCode::kUnavailable,
                     "partition " + std::to_string(options_.partition) +
                         (stopping_ ? ": the log is closing" : ": another node took it over"));
  }
  Entry entry;
  entry.seq = ++appended_seq_;
  entry.kind = kind;
  entry.bytes = std::move(record);
  entries_.push_back(std::move(entry));
  ++stats_.appended;
  Wake();
  return appended_seq_;
}

PartitionLogProgress PartitionLog::WaitDurable(uint64_t seq, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  durable_cv_.wait_for(lock, timeout, [&] {
    return durable_seq_ >= seq || state_ == PartitionLogState::kFenced || stopping_;
  });
  return ProgressLocked();
}

PartitionLogProgress PartitionLog::progress() const {
  std::lock_guard lock(mutex_);
  return ProgressLocked();
}

PartitionLogProgress PartitionLog::ProgressLocked() const {
  return PartitionLogProgress{state_, durable_seq_, appended_seq_, durable_sent_at_};
}

PartitionLogStats PartitionLog::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::optional<FenceInfo> PartitionLog::fence() const {
  std::lock_guard lock(mutex_);
  return fence_;
}

PartitionLog::Entry* PartitionLog::Find(uint64_t seq) {
  if (entries_.empty() || seq < entries_.front().seq) return nullptr;
  const uint64_t index = seq - entries_.front().seq;
  return index < entries_.size() ? &entries_[index] : nullptr;
}

void PartitionLog::Run() {
  std::unique_lock lock(mutex_);
  PartitionLogProgress reported = ProgressLocked();
  bool timer_woke = false;  // the last wait ended on its timer, not on a Wake()
  while (!stopping_) {
    const uint64_t seen = wakeups_;  // everything below looks at the entries as of now
    // Only the first look after such a wait: a later pass (after on_progress_) may find
    // records an outcome made durable, with its Wake(), while the lock was let go.
    const bool after_timer = std::exchange(timer_woke, false);
    if (PopDurable() > 0 && after_timer) ++stats_.late_durable;
    if (state_ != PartitionLogState::kFenced && !entries_.empty() &&
        entries_.front().state == EntryState::kFailed &&
        Clock::now() >= entries_.front().retry_at) {
      HandleHeadFailure(lock);  // may find the head durable (by a lookup)
      PopDurable();
    }
    if (state_ != PartitionLogState::kFenced) SendWindow(lock);
    UpdateStall();

    const PartitionLogProgress now = ProgressLocked();
    if (now.state != reported.state || now.durable_seq != reported.durable_seq) {
      reported = now;
      durable_cv_.notify_all();
      if (on_progress_) {
        lock.unlock();
        on_progress_(now);
        lock.lock();
      }
      continue;
    }
    auto wake = Clock::now() + kIdleWake;
    if (!entries_.empty()) {
      const Entry& head = entries_.front();
      if (head.state == EntryState::kFailed) wake = std::min(wake, head.retry_at);
      if (state_ == PartitionLogState::kWriting && head.ever_sent) {
        wake = std::min(wake, head.first_sent + std::chrono::milliseconds(options_.stall_after_ms));
      }
    }
    timer_woke = !changed_.wait_until(lock, wake, [&] { return wakeups_ != seen; });
  }
}

void PartitionLog::Wake() {
  ++wakeups_;
  changed_.notify_one();
}

size_t PartitionLog::PopDurable() {
  size_t popped = 0;
  while (!entries_.empty() && entries_.front().state == EntryState::kDurable) {
    durable_seq_ = entries_.front().seq;
    durable_sent_at_ = std::max(durable_sent_at_, entries_.front().first_sent);
    entries_.pop_front();
    if (sent_ > 0) --sent_;
    ++popped;
  }
  return popped;
}

void PartitionLog::MarkDurable(Entry& entry, bool duplicate) {
  entry.state = EntryState::kDurable;
  ++stats_.durable;
  if (duplicate) ++stats_.duplicates;
  if (entry.ever_sent)
    stats_.longest_wait_ms = std::max(stats_.longest_wait_ms, ElapsedMs(entry.first_sent));
}

void PartitionLog::HandleHeadFailure(std::unique_lock<std::mutex>& lock) {
  Entry& head = entries_.front();
  if (head.failure != Failure::kLookup) {
    ResendFromHead();
    return;
  }
  // 10071/10070 (or a PubAck at another place): what does the stream hold at our sequence?
  const uint64_t seq = head.seq;
  const uint64_t attempt = head.attempt;
  lock.unlock();
  auto found = connection_.GetMessage(options_.stream, seq);
  lock.lock();
  Entry* entry = Find(seq);
  if (stopping_ || entry == nullptr || entry->state != EntryState::kFailed ||
      entry->attempt != attempt) {
    return;  // resolved meanwhile (a late PubAck of an earlier send)
  }
  if (!found) {  // cannot tell now (no leader, no quorum): ask again later
    ++entry->failures;
    entry->retry_at = Clock::now() + RetryDelay(entry->failures);
    return;
  }
  if (!found->has_value()) {
    ResendFromHead();  // nothing there yet: the chain broke behind us, not a fence
  } else if ((*found)->msg_id == MessageId(seq)) {
    ++stats_.found_by_lookup;
    MarkDurable(*entry, true);
  } else {
    Fence(seq, (*found)->msg_id);
  }
}

void PartitionLog::ResendFromHead() {
  for (size_t i = 0; i < sent_; ++i) {
    Entry& entry = entries_[i];
    if (entry.state == EntryState::kDurable) continue;
    entry.state = EntryState::kQueued;
    entry.attempt = 0;
  }
  sent_ = 0;
  ++stats_.resend_rounds;
}

void PartitionLog::SendWindow(std::unique_lock<std::mutex>& lock) {
  while (!stopping_ && state_ != PartitionLogState::kFenced && sent_ < entries_.size() &&
         sent_ < options_.max_in_flight) {
    // A failed send in the window breaks the chain: everything resends from the head.
    const bool broken = std::any_of(entries_.begin(), entries_.begin() + sent_,
                                    [](const Entry& e) { return e.state == EntryState::kFailed; });
    if (broken) return;
    Entry& entry = entries_[sent_];
    if (entry.state == EntryState::kDurable) {  // a late PubAck came before its resend
      ++sent_;
      continue;
    }
    // Sent behind a record not known durable: it must land right after that very record.
    const bool pipelined = sent_ > 0 && entries_[sent_ - 1].state != EntryState::kDurable;
    const uint64_t seq = entry.seq;
    const uint64_t attempt = ++next_attempt_;
    entry.attempt = attempt;
    entry.state = EntryState::kSent;
    if (!entry.ever_sent) {
      entry.ever_sent = true;
      entry.first_sent = Clock::now();
    }
    attempts_[attempt] = seq;
    ++sent_;
    ++stats_.sends;

    const std::string id = MessageId(seq);
    const std::string previous_id = pipelined ? MessageId(seq - 1) : std::string();
    const MessageHeader headers[] = {{"Tally-Kind", RecordKindName(entry.kind)},
                                     {"Nats-Expected-Last-Msg-Id", previous_id}};
    Publication publication;
    publication.subject = options_.subject;
    publication.data = entry.bytes;  // stable: only this thread pops entries
    publication.msg_id = id;
    publication.expected_last_seq = seq - 1;
    publication.headers = std::span<const MessageHeader>(headers, pipelined ? 2 : 1);
    lock.unlock();
    const NatsStatus sent = publisher_->Publish(attempt, publication, options_.publish_timeout_ms);
    if (options_.after_send) options_.after_send();
    lock.lock();
    if (!sent) {
      attempts_.erase(attempt);
      ++stats_.send_failures;
      if (Entry* failed = Find(seq); failed != nullptr && failed->attempt == attempt) {
        failed->state = EntryState::kFailed;
        failed->failure = Failure::kRetry;
        ++failed->failures;
        failed->retry_at = Clock::now() + RetryDelay(failed->failures);
      }
      return;
    }
  }
}

void PartitionLog::UpdateStall() {
  if (state_ == PartitionLogState::kFenced) return;
  const bool stalled = !entries_.empty() && entries_.front().ever_sent &&
                       ElapsedMs(entries_.front().first_sent) >= options_.stall_after_ms;
  state_ = stalled ? PartitionLogState::kStalled : PartitionLogState::kWriting;
}

void PartitionLog::Fence(uint64_t seq, std::string found_msg_id) {
  state_ = PartitionLogState::kFenced;
  fence_ = FenceInfo{seq, std::move(found_msg_id)};
}

std::chrono::milliseconds PartitionLog::RetryDelay(int failures) const {
  const int doublings = std::clamp(failures - 1, 0, 5);
  return std::min(kMaxRetryDelay, std::chrono::milliseconds(options_.retry_delay_ms << doublings));
}

void PartitionLog::OnOutcome(uint64_t attempt, NatsResult<PubAck> outcome) {
  std::lock_guard lock(mutex_);
  const auto sent = attempts_.find(attempt);
  if (sent == attempts_.end()) return;
  const uint64_t seq = sent->second;
  attempts_.erase(sent);
  Failure failure = Failure::kLookup;
  if (outcome) {
    Entry* entry = Find(seq);
    // A PubAck of any send, the current one or an earlier, is a fact: the record is there.
    if (outcome->seq == seq && outcome->stream == options_.stream) {
      if (entry != nullptr && entry->state != EntryState::kDurable) {
        MarkDurable(*entry, outcome->duplicate);
        Wake();
      }
      return;
    }
  } else {
    switch (ClassifyPublishFailure(outcome.error())) {
      case PublishFailure::kTimeout:
        ++stats_.timeouts;
        failure = Failure::kResendNow;
        break;
      case PublishFailure::kNoResponders:
        ++stats_.no_responders;
        failure = Failure::kRetry;
        break;
      case PublishFailure::kWrongLast:
        ++stats_.wrong_last;
        failure = Failure::kLookup;
        break;
      case PublishFailure::kOther:
        ++stats_.other_failures;
        failure = Failure::kRetry;
        break;
    }
  }
  Entry* entry = Find(seq);
  // Only the current send of a record decides; a superseded one was resent already.
  if (entry == nullptr || entry->state != EntryState::kSent || entry->attempt != attempt) return;
  entry->state = EntryState::kFailed;
  entry->failure = failure;
  ++entry->failures;
  entry->retry_at = Clock::now() + (failure == Failure::kRetry ? RetryDelay(entry->failures)
                                                               : std::chrono::milliseconds(0));
  Wake();
}

}  // namespace tally::cluster
