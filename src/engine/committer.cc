#include "engine/committer.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/thread_name.h"

namespace tally::engine {
namespace {

// Announced batches kept by the sync thread for their capacity (a batch's vectors and key
// bytes), so that a steady stream of commits allocates nothing.
constexpr size_t kSpareBatches = 4;

}  // namespace

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
  if (options_.durability == Durability::kSync) {
    {
      std::lock_guard lock(sync_mutex_);
      sync_running_ = true;
    }
    sync_thread_ = NamedThread("commit sync", [this] { RunSyncs(); });
  }
  thread_ = NamedThread("commit", [this] { Run(); });
  checkpoint_thread_ = NamedThread("checkpoint", [this] { RunCheckpoints(); });
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
  if (sync_thread_.joinable()) {
    // The committer thread handed over everything left; the sync thread announces it all
    // before it exits.
    {
      std::lock_guard lock(sync_mutex_);
      sync_stopping_ = true;
    }
    sync_wake_.notify_one();
    sync_thread_.join();
  }
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
  if (options_.durability == Durability::kSync && LeaveToSyncThread()) return true;
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
    if (stopping || !sync_now || !LeaveToSyncThread()) {
      std::lock_guard commit(commit_mutex_);
      CommitOnce(sync_now);
    }

    if (unsynced_.load(std::memory_order_relaxed) && (stopping || Clock::now() >= next_sync)) {
      std::lock_guard commit(commit_mutex_);
      if (auto status = SyncLog(); !status) {
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
  if (changed == 0) return persistence_->stats().checkpoint_wanted;
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
    // No fsync may run while the log rotates (the sync thread's takes only log_sync_mutex_).
    std::lock_guard commit(commit_mutex_);
    std::lock_guard sync(log_sync_mutex_);
    auto begun = persistence_->BeginCheckpoint();
    if (!begun) return tl::unexpected(begun.error());
    token = *begun;
    cursor = keyspace_->TakeCheckpoint([&] { persistence_->CheckpointCut(token); });
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
  // fsync'd (announced: in sync mode, after the sync thread's fdatasync returned), so that
  // recovery from these tables never shows an uncommitted write.
  WaitDurable(cursor.newest_epoch);
  if (durable_epoch() < cursor.newest_epoch) {
    return fail(
        Error{ErrorCode::kUnavailable, "stopped before the checkpoint's epochs were durable"});
  }
  {
    std::lock_guard commit(commit_mutex_);
    if (auto status = SyncLog(); !status) return fail(status.error());
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
  const auto drained = Clock::now();
  // A failed write leaves the epoch not durable: its replies stay held, and the same batch
  // is retried (its puts carry absolute values, so a retry is harmless).
  if (!batch_.empty()) Write(batch_);
  if (sync) {
    if (HandToSyncThread(drained)) return true;
    // No sync thread (before Start, after Stop): fsync here. A failed fsync may have lost
    // the pages it was to write: write the batch again before the retry.
    for (int attempt = 1; !batch_.empty(); ++attempt) {
      auto status = SyncLog();
      if (status) break;
      Failed("fsync", batch_.epoch(), attempt, status.error());
      Write(batch_);
    }
  } else if (!batch_.empty()) {
    unsynced_.store(true, std::memory_order_relaxed);
  }
  Announce(batch_, drained);
  return true;
}

void Committer::Write(const CommitBatch& batch) {
  for (int attempt = 1;; ++attempt) {
    auto status = persistence_->Commit(batch, /*sync=*/false);
    if (status) return;
    Failed("commit", batch.epoch(), attempt, status.error());
  }
}

Status Committer::SyncLog() {
  std::lock_guard lock(log_sync_mutex_);
  return persistence_->Sync();
}

void Committer::Failed(std::string_view what, uint64_t epoch, int attempt, const Error& error) {
  {
    std::lock_guard lock(stats_mutex_);
    stats_.failures++;
    stats_.healthy = false;
  }
  spdlog::error("{} of epoch {} failed (attempt {}): {}", what, epoch, attempt, error.message);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::min(1000, 10 << std::min(attempt, 6))));
}

bool Committer::HandToSyncThread(Clock::time_point drained) {
  bool wake;
  {
    std::lock_guard lock(sync_mutex_);
    if (!sync_running_) return false;
    pending_.push_back(Pending{std::move(batch_), drained});
    if (!spare_.empty()) {
      batch_ = std::move(spare_.back());
      spare_.pop_back();
    }
    // Only an idle sync thread needs the wake-up (a futex call): a busy one looks at
    // pending_ again once its fdatasync returns.
    wake = std::exchange(sync_idle_, false);
  }
  if (wake) sync_wake_.notify_one();
  return true;
}

bool Committer::LeaveToSyncThread() {
  std::lock_guard lock(sync_mutex_);
  if (!sync_running_ || sync_idle_) return false;
  commit_wanted_ = true;
  return true;
}

void Committer::RunSyncs() {
  std::vector<Pending> durable;
  int attempt = 0;
  std::unique_lock lock(sync_mutex_);
  for (;;) {
    if (commit_wanted_) {
      // Written while an fdatasync ran, it would have waited for the next one anyway: write
      // it now, as one batch, just before that next one begins.
      commit_wanted_ = false;
      lock.unlock();
      {
        std::lock_guard commit(commit_mutex_);
        CommitOnce(/*sync=*/true);  // queues the batch (no wake: this thread is not idle)
      }
      lock.lock();
      continue;
    }
    if (pending_.empty()) {
      if (sync_stopping_) break;
      sync_idle_ = true;
      sync_wake_.wait(lock);
      sync_idle_ = false;
      continue;
    }
    // Every batch queued now was written before the fdatasync below begins: it covers them.
    const size_t count = pending_.size();
    const bool written = std::any_of(pending_.begin(), pending_.end(),
                                     [](const Pending& pending) { return !pending.batch.empty(); });
    const uint64_t newest = pending_.back().batch.epoch();
    lock.unlock();
    if (written) {
      if (auto status = SyncLog(); !status) {
        Failed("fsync", newest, ++attempt, status.error());
        WritePendingAgain();
        lock.lock();
        continue;
      }
      std::lock_guard stats(stats_mutex_);
      stats_.syncs++;
    }
    attempt = 0;
    lock.lock();
    for (size_t i = 0; i < count; ++i) {
      durable.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    lock.unlock();
    for (const Pending& pending : durable) Announce(pending.batch, pending.drained);
    lock.lock();
    for (Pending& pending : durable) {
      if (spare_.size() < kSpareBatches) spare_.push_back(std::move(pending.batch));
    }
    durable.clear();
  }
  sync_running_ = false;
}

void Committer::WritePendingAgain() {
  // In epoch order and after every other record, so that replay ends with their values.
  // Without sync_mutex_, so that loop threads asking for a commit meanwhile are not held up
  // by a failing store: with commit_mutex_ held nobody adds to pending_, and only this
  // thread removes from it.
  std::lock_guard commit(commit_mutex_);
  for (const Pending& pending : pending_) {
    if (!pending.batch.empty()) Write(pending.batch);
  }
}

void Committer::Announce(const CommitBatch& batch, Clock::time_point drained) {
  const auto micros = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - drained).count());
  {
    std::lock_guard lock(stats_mutex_);
    stats_.commits++;
    stats_.puts += batch.put_count();
    stats_.deletes += batch.delete_count();
    stats_.last_commit_micros = micros;
    stats_.total_commit_micros += micros;
    stats_.healthy = true;
  }
  durable_epoch_.store(batch.epoch(), std::memory_order_release);
  {
    std::lock_guard lock(listeners_mutex_);
    for (const auto& observer : observers_) observer(batch, micros);
    for (const auto& listener : listeners_) listener(batch.epoch());
  }
  {
    std::lock_guard lock(mutex_);
    durable_changed_.notify_all();
  }
}

}  // namespace tally::engine
