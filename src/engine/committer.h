// Committer: the group commit. A commit drains every change of the open epoch into one
// CommitBatch (closing the epoch), writes it through Persistence and, in sync mode, has it
// fsync'd; then it announces the epoch as durable. While one batch is being written or
// fsync'd, writers go on filling the next epoch, so the fsync is shared by everything that
// arrived meanwhile.
//
// Who writes: by default the I/O threads themselves, at the end of their event-loop turn
// (TryCommitNow when their replies wait in sync mode, CommitWrittenInline in async mode), so
// a commit costs no thread hand-off; one write runs at a time (commit_mutex_). The
// committer thread sweeps up on a timer — writes no I/O thread committed, expiry, the
// periodic fsync of async mode — or, with commit_on_waiting_thread = false, writes every
// commit itself. A second thread writes checkpoints (see Persistence).
//
// Who fsyncs (sync mode): the sync thread. The writer of commit N hands the batch over and
// returns at once (its loop goes on parsing and applying the requests of N+1); the sync
// thread fdatasyncs, and only once an fdatasync that began after N was written has returned
// does it announce N: durable_epoch(), the observers, the listeners (which wake the loops
// whose replies wait). One fdatasync at a time. A commit asked for while the sync thread is
// busy (TryCommitNow, the timer) is not written by the asker: the sync thread drains and
// writes it, as one batch, right after its fdatasync and announcements, then fsyncs it —
// the same durability as writing it at once (only the next fdatasync could cover it), with
// one write(2) and one drain per fdatasync instead of one per loop turn (measured: at -P 1
// the per-turn writes cost more CPU than the overlap saved). The written batches wait in
// pending_ until then, so that observers see each batch once durable, in epoch order. A
// failed fdatasync announces nothing: the sync thread writes every pending batch again (the
// kernel may have dropped the failed pages) and retries with backoff, replies held
// meanwhile. Before Start() and after Stop() there is no sync thread, and the writer
// fsyncs and announces itself, as in async mode (which has no sync thread at all).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/keyspace.h"
#include "engine/persistence.h"

namespace tally::engine {

enum class Durability {
  kSync,   // acknowledge after the batch is fsync'd
  kAsync,  // acknowledge at once; commit continuously, fsync every sync_interval_ms
};

struct CommitterOptions {
  Durability durability = Durability::kSync;
  // Async mode: how often the write-ahead log is fsync'd. Default 100 ms.
  int sync_interval_ms = 100;
  // true = commits are written by the I/O threads themselves at the end of their turn (sync
  // mode: the thread whose replies wait; async mode: any thread that wrote), with no thread
  // hand-off; false = the committer thread writes them while I/O threads go on serving.
  bool commit_on_waiting_thread = true;
  // How often expired counters are reclaimed, and how many at most each time.
  int reclaim_interval_ms = 100;
  size_t reclaim_budget = 20000;
  // A checkpoint writes the counters changed since the previous one into the store's
  // tables, so that the log can be dropped and a restart replays little. It starts when
  // this much time has passed, or this many counters changed, or this much log grew.
  int checkpoint_interval_ms = 10000;
  size_t checkpoint_max_changed = 2'000'000;
  uint64_t checkpoint_max_log_bytes = 256ull << 20;
};

// Counters of the committer's work, for INFO and metrics.
struct CommitStats {
  uint64_t commits = 0;  // epochs announced durable, empty ones included
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t failures = 0;  // failed writes and failed fsyncs (each retried)
  uint64_t syncs = 0;     // fsyncs of the sync thread; commits / syncs = commits per fsync
  // A commit's latency: from the drain that closed its epoch to its announcement. In sync
  // mode this includes the wait for the fsync (and for an fsync already running, which does
  // not cover it): what a reply waiting for the epoch waits, not what the writer spent.
  uint64_t last_commit_micros = 0;
  uint64_t total_commit_micros = 0;
  uint64_t reclaimed = 0;
  bool healthy = true;
  uint64_t checkpoints = 0;
  uint64_t checkpoint_failures = 0;
  uint64_t last_checkpoint_ms = 0;
};

class Committer {
  using Clock = std::chrono::steady_clock;

 public:
  Committer(Keyspace* keyspace, Persistence* persistence, CommitterOptions options);
  ~Committer();  // Stops (see Stop()).
  Committer(const Committer&) = delete;
  Committer& operator=(const Committer&) = delete;

  // Calls `listener` with each epoch once it is durable, in epoch order, one call at a time,
  // on the thread that announced it: in sync mode the sync thread (a writer's own thread
  // before Start() and after Stop()); in async mode the thread that wrote it (the committer
  // thread, or a worker committing inline). Any thread, any time.
  void AddDurableListener(std::function<void(uint64_t epoch)> listener);

  // Calls `observer` with each batch once it is durable, and how long it took from the drain
  // to durable (see CommitStats), on the announcing thread, before the epoch's durable
  // listeners. The feed of subscriptions and metrics: every committed change, as its final
  // value. An observer must be quick (it delays the next announcement) and must not call
  // back into the committer.
  using CommitObserver = std::function<void(const CommitBatch& batch, uint64_t commit_micros)>;
  void AddCommitObserver(CommitObserver observer);

  void Start();

  // Commits whatever is left (fsync'd and announced, whatever the mode), writes a last
  // checkpoint and joins the threads.
  void Stop();

  // Writes a checkpoint now and waits for it. For tests and tools.
  Status CheckpointNow();

  // Wakes the committer: something was written. Cheap when a wake-up is already pending.
  // Sync mode with commit_on_waiting_thread: nothing (whoever waits commits, TryCommitNow).
  // Async mode with it: sets the flag CommitWrittenInline consumes at the end of a turn.
  // Without it: wakes the committer thread.
  void RequestCommit();

  // Writes everything written so far on the calling thread, and has it announced once
  // durable: in sync mode the sync thread fsyncs it and announces it later (the call does
  // not wait for the fsync); in async mode it is announced before the call returns. Returns
  // false, at once, when another thread is writing: its announcement follows, and whatever
  // it did not include needs another call then.
  bool TryCommitNow();

  // Every epoch up to this one is durable (in async mode: written, not yet fsync'd).
  uint64_t durable_epoch() const { return durable_epoch_.load(std::memory_order_acquire); }

  // Blocks until `epoch` is durable (or the committer stops). For tests and tools.
  void WaitDurable(uint64_t epoch);

  CommitStats stats() const;
  Durability durability() const { return options_.durability; }
  bool commits_on_waiting_thread() const {
    return options_.durability == Durability::kSync && options_.commit_on_waiting_thread;
  }

  // Async mode with inline commits: writes (without fsync) whatever was written since the
  // last commit, on the calling thread (after any commit in progress). Returns once it is in
  // the log, so a process crash after it loses none of it. Cheap when nothing was written.
  // The committer thread fsyncs every sync_interval_ms.
  void CommitWrittenInline();

 private:
  void Run();
  void RunCheckpoints();
  bool CheckpointDue(std::chrono::steady_clock::time_point last) const;
  Status Checkpoint();
  // Drains and writes one batch; with `sync`, hands it to the sync thread (or fsyncs it
  // here when there is none), else announces it. False when there was nothing to write.
  // REQUIRES: commit_mutex_ held.
  bool CommitOnce(bool sync);
  // Writes `batch` (no fsync), retrying with backoff until the store takes it.
  // REQUIRES: commit_mutex_ held.
  void Write(const CommitBatch& batch);
  // persistence_->Sync() under log_sync_mutex_.
  Status SyncLog();
  // Counts a failed write or fsync and sleeps the backoff of the attempt'th failure in a row.
  void Failed(std::string_view what, uint64_t epoch, int attempt, const Error& error);
  // Moves batch_ to the sync thread's queue and wakes it; false when the sync thread does
  // not run. REQUIRES: commit_mutex_ held.
  bool HandToSyncThread(Clock::time_point drained);
  // Sync mode: when the sync thread is busy (an fdatasync runs, or its announcements), asks
  // it to write the next commit once it is done, and returns true; false when the caller
  // must write it (the sync thread waits for work, or does not run).
  bool LeaveToSyncThread();
  // The sync thread: writes the commits left to it, fsyncs what was written, then announces.
  void RunSyncs();
  // After a failed fsync: writes every pending batch again, in order.
  void WritePendingAgain();
  // Publishes `batch` as durable: stats, durable_epoch_, observers, listeners, waiters.
  // REQUIRES: one announcer at a time, in epoch order (the sync thread, else commit_mutex_).
  void Announce(const CommitBatch& batch, Clock::time_point drained);

  Keyspace* const keyspace_;
  Persistence* const persistence_;
  const CommitterOptions options_;
  std::mutex listeners_mutex_;
  std::vector<std::function<void(uint64_t)>> listeners_;  // guarded by listeners_mutex_
  std::vector<CommitObserver> observers_;                 // guarded by listeners_mutex_

  std::mutex mutex_;
  std::condition_variable wake_;             // the commit thread
  std::condition_variable checkpoint_wake_;  // the checkpoint thread
  std::condition_variable durable_changed_;
  bool stopping_ = false;  // guarded by mutex_
  std::atomic<bool> commit_requested_{false};
  std::atomic<uint64_t> durable_epoch_{0};
  std::thread thread_;
  std::thread checkpoint_thread_;
  std::mutex checkpoint_mutex_;  // one checkpoint at a time

  std::mutex commit_mutex_;    // held by the one thread writing; before sync_mutex_
  CommitBatch batch_;          // guarded by commit_mutex_
  std::mutex log_sync_mutex_;  // held around every Persistence::Sync and BeginCheckpoint

  // The sync thread's queue (sync mode). Lock order: commit_mutex_, then sync_mutex_.
  struct Pending {
    CommitBatch batch;
    Clock::time_point drained;
  };
  std::mutex sync_mutex_;
  std::condition_variable sync_wake_;
  // Written, not yet announced, in epoch order. Added to under commit_mutex_ and sync_mutex_,
  // removed from by the sync thread under sync_mutex_.
  std::deque<Pending> pending_;
  std::vector<CommitBatch> spare_;  // announced batches, kept for their capacity
  bool sync_running_ = false;       // between Start() and the sync thread's exit
  bool sync_idle_ = false;          // the sync thread waits for sync_wake_
  bool commit_wanted_ = false;      // LeaveToSyncThread: the sync thread writes next
  bool sync_stopping_ = false;      // Stop(): exit once pending_ is empty
  std::thread sync_thread_;
  // Async commits written but not yet fsync'd. Written under commit_mutex_, read anywhere.
  std::atomic<bool> unsynced_{false};
  mutable std::mutex stats_mutex_;
  CommitStats stats_;  // guarded by stats_mutex_
};

}  // namespace tally::engine
