#include "engine/committer.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace tally::engine {

using Clock = std::chrono::steady_clock;

Committer::Committer(Keyspace* keyspace, Persistence* persistence, CommitterOptions options)
    : keyspace_(keyspace), persistence_(persistence), options_(options) {}

Committer::~Committer() { Stop(); }

void Committer::AddDurableListener(std::function<void(uint64_t)> listener) {
  std::lock_guard lock(listeners_mutex_);
  listeners_.push_back(std::move(listener));
}

void Committer::AddCommitObserver(CommitObserver observer) {
  std::lock_guard lock(listeners_mutex_);
  observers_.push_back(std::move(observer));
}

void Committer::Start() {
  durable_epoch_.store(keyspace_->open_epoch() - 1, std::memory_order_release);
  thread_ = std::thread([this] { Run(); });
  checkpoint_thread_ = std::thread([this] { RunCheckpoints(); });
}

void Committer::Stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  checkpoint_wake_.notify_all();
  if (checkpoint_thread_.joinable()) checkpoint_thread_.join();
  if (thread_.joinable()) thread_.join();
  if (keyspace_->checkpoint_backlog() > 0) {
    // A last checkpoint, so that the next start replays (almost) nothing.
    if (auto status = Checkpoint(); !status) {
      spdlog::error("final checkpoint failed (the log keeps everything): {}",
                    status.error().message);
    }
  }
}

void Committer::RequestCommit() {
  if (commits_on_waiting_thread()) return;
  if (commit_requested_.load(std::memory_order_relaxed)) return;
  if (options_.commit_on_waiting_thread) {
    // Async inline: the writer's I/O thread commits at the end of its turn; the committer
    // thread sweeps up on its timer whatever no I/O thread did.
    commit_requested_.store(true, std::memory_order_release);
    return;
  }
  if (!commit_requested_.exchange(true, std::memory_order_acq_rel)) {
    std::lock_guard lock(mutex_);
    wake_.notify_one();
  }
}

void Committer::CommitWrittenInline() {
  if (!commit_requested_.load(std::memory_order_acquire)) return;
  if (!commit_requested_.exchange(false, std::memory_order_acq_rel)) return;
  // Wait for a commit in progress rather than skip: the caller sends its replies next, and
  // an acknowledged write must be in the log (the page cache) by then.
  std::lock_guard lock(commit_mutex_);
  CommitOnce(/*sync=*/false);
}

bool Committer::TryCommitNow() {
  std::unique_lock lock(commit_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  CommitOnce(options_.durability == Durability::kSync);
  return true;
}

void Committer::WaitDurable(uint64_t epoch) {
  while (durable_epoch() < epoch) {
    // Commit inline when nobody else is. An epoch that this does not make durable is not
    // closed yet (nothing written in it so far): wait for it rather than spin, and give up
    // once stopping, as promised.
    if (TryCommitNow() && durable_epoch() >= epoch) return;
    std::unique_lock lock(mutex_);
    durable_changed_.wait_for(lock, std::chrono::milliseconds(10),
                              [&] { return stopping_ || durable_epoch() >= epoch; });
    if (stopping_) return;
  }
}

CommitStats Committer::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void Committer::Run() {
  auto next_sync = Clock::now() + std::chrono::milliseconds(options_.sync_interval_ms);
  auto next_reclaim = Clock::now() + std::chrono::milliseconds(options_.reclaim_interval_ms);
  for (;;) {
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      const auto deadline = std::min(
          next_reclaim, unsynced_.load(std::memory_order_relaxed) ? next_sync : next_reclaim);
      // With inline commits the request flag is the I/O threads' business: this thread only
      // sweeps up on its timer (waking on the flag would compete for the core every turn).
      wake_.wait_until(lock, deadline, [&] {
        return stopping_ || (!options_.commit_on_waiting_thread &&
                             commit_requested_.load(std::memory_order_acquire));
      });
      stopping = stopping_;
    }
    commit_requested_.store(false, std::memory_order_release);

    const auto now = Clock::now();
    if (now >= next_reclaim) {
      const size_t removed = keyspace_->ReclaimExpired(options_.reclaim_budget);
      if (removed > 0) {
        std::lock_guard lock(stats_mutex_);
        stats_.reclaimed += removed;
      }
      next_reclaim = now + std::chrono::milliseconds(options_.reclaim_interval_ms);
    }

    const bool sync_now = options_.durability == Durability::kSync || stopping;
    {
      std::lock_guard commit(commit_mutex_);
      CommitOnce(sync_now);
    }

    if (unsynced_.load(std::memory_order_relaxed) && (stopping || Clock::now() >= next_sync)) {
      std::lock_guard commit(commit_mutex_);
      if (auto status = persistence_->Sync(); !status) {
        spdlog::error("fsync of the write-ahead log failed: {}", status.error().message);
      } else {
        unsynced_.store(false, std::memory_order_relaxed);
      }
      next_sync = Clock::now() + std::chrono::milliseconds(options_.sync_interval_ms);
    }
    if (stopping) {
      // Drain until nothing is left: writers may have raced with the stop.
      std::lock_guard commit(commit_mutex_);
      while (CommitOnce(true)) {
      }
      std::lock_guard lock(mutex_);
      durable_changed_.notify_all();
      return;
    }
  }
}

bool Committer::CheckpointDue(Clock::time_point last) const {
  const size_t changed = keyspace_->checkpoint_backlog();
  if (changed == 0) return false;
  return changed >= options_.checkpoint_max_changed ||
         persistence_->stats().log_bytes >= options_.checkpoint_max_log_bytes ||
         Clock::now() - last >= std::chrono::milliseconds(options_.checkpoint_interval_ms);
}

void Committer::RunCheckpoints() {
  auto last = Clock::now();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    checkpoint_wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_ || !CheckpointDue(last)) continue;
    lock.unlock();
    last = Clock::now();
    if (auto status = Checkpoint(); !status) {
      spdlog::error(
          "checkpoint failed (the log keeps everything; the next one writes all "
          "counters): {}",
          status.error().message);
    }
    lock.lock();
  }
}

Status Committer::CheckpointNow() { return Checkpoint(); }

Status Committer::Checkpoint() {
  std::lock_guard one_at_a_time(checkpoint_mutex_);
  const auto started = Clock::now();
  const auto fail = [this](const Error& error) -> Status {
    keyspace_->RequireFullCheckpoint();
    std::lock_guard lock(stats_mutex_);
    stats_.checkpoint_failures++;
    return tl::unexpected(error);
  };
  uint64_t token;
  Keyspace::CheckpointCursor cursor;
  {
    // Rotate the log first, then take the marks: a commit in between lands in the new
    // segment (kept) and is also in this checkpoint (harmless); the other order could drop
    // a segment holding a commit this checkpoint does not cover.
    std::lock_guard commit(commit_mutex_);
    auto begun = persistence_->BeginCheckpoint();
    if (!begun) return tl::unexpected(begun.error());
    token = *begun;
    cursor = keyspace_->TakeCheckpoint();
  }
  CommitBatch chunk;
  bool more = true;
  while (more) {
    chunk.Clear();
    more = keyspace_->ReadCheckpoint(cursor, 10000, &chunk);
    if (chunk.empty()) continue;
    if (auto status = persistence_->CheckpointWrite(chunk); !status) return fail(status.error());
  }
  // The values written may come from epochs not yet durable: finish only once they are,
  // fsync'd, so that recovery from these tables never shows an uncommitted write.
  WaitDurable(cursor.newest_epoch);
  if (durable_epoch() < cursor.newest_epoch) {
    return fail(
        Error{ErrorCode::kUnavailable, "stopped before the checkpoint's epochs were durable"});
  }
  {
    std::lock_guard commit(commit_mutex_);
    if (auto status = persistence_->Sync(); !status) return fail(status.error());
    unsynced_.store(false, std::memory_order_relaxed);
  }
  if (auto status = persistence_->FinishCheckpoint(token); !status) return fail(status.error());
  // A checkpoint frees the marks and buffers it took, in many small blocks; hand the free
  // pages back to the OS so that resident memory follows the counters actually held.
  ::malloc_trim(0);
  std::lock_guard lock(stats_mutex_);
  stats_.checkpoints++;
  stats_.last_checkpoint_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count());
  return OkStatus();
}

bool Committer::CommitOnce(bool sync) {
  batch_.Clear();
  if (!keyspace_->Drain(&batch_)) return false;
  const auto started = Clock::now();
  // A failed write leaves the epoch not durable: its replies stay held, and the same batch
  // is retried (its puts carry absolute values, so a retry is harmless).
  int attempt = 0;
  while (!batch_.empty()) {
    auto status = persistence_->Commit(batch_, sync);
    if (status) {
      if (!sync) unsynced_.store(true, std::memory_order_relaxed);
      break;
    }
    {
      std::lock_guard lock(stats_mutex_);
      stats_.failures++;
      stats_.healthy = false;
    }
    spdlog::error("commit of epoch {} failed (attempt {}): {}", batch_.epoch(), ++attempt,
                  status.error().message);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(1000, 10 << std::min(attempt, 6))));
  }
  const auto micros = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
  {
    std::lock_guard lock(stats_mutex_);
    stats_.commits++;
    stats_.puts += batch_.put_count();
    stats_.deletes += batch_.delete_count();
    stats_.last_commit_micros = micros;
    stats_.total_commit_micros += micros;
    stats_.healthy = true;
  }
  durable_epoch_.store(batch_.epoch(), std::memory_order_release);
  {
    std::lock_guard lock(listeners_mutex_);
    for (const auto& observer : observers_) observer(batch_, micros);
    for (const auto& listener : listeners_) listener(batch_.epoch());
  }
  {
    std::lock_guard lock(mutex_);
    durable_changed_.notify_all();
  }
  return true;
}

}  // namespace tally::engine
