// Committer: the group commit. A commit drains every change of the open epoch into one
// CommitBatch (closing the epoch), writes it through Persistence — fsync'd in sync mode —
// and announces the epoch as durable. While one batch is being written, writers go on
// filling the next epoch, so the fsync is shared by everything that arrived meanwhile.
//
// Who commits: by default the I/O threads themselves, at the end of their event-loop turn
// (TryCommitNow when their replies wait in sync mode, CommitWrittenInline in async mode), so
// a commit costs no thread hand-off; one commit runs at a time (commit_mutex_). The
// committer thread sweeps up on a timer — writes no I/O thread committed, expiry, the
// periodic fsync of async mode — or, with commit_on_waiting_thread = false, does every
// commit itself. A second thread writes checkpoints (see Persistence).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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
  uint64_t commits = 0;
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t failures = 0;
  uint64_t last_commit_micros = 0;
  uint64_t total_commit_micros = 0;
  uint64_t reclaimed = 0;
  bool healthy = true;
  uint64_t checkpoints = 0;
  uint64_t checkpoint_failures = 0;
  uint64_t last_checkpoint_ms = 0;
};

class Committer {
 public:
  Committer(Keyspace* keyspace, Persistence* persistence, CommitterOptions options);
  ~Committer();  // Stops (see Stop()).
  Committer(const Committer&) = delete;
  Committer& operator=(const Committer&) = delete;

  // Calls `listener` with each epoch once it is durable, on the thread that committed it
  // (the committer thread, or a worker committing inline). Any thread, any time.
  void AddDurableListener(std::function<void(uint64_t epoch)> listener);

  // Calls `observer` with each batch once it is durable, and how long writing it took, on
  // the thread that committed it, before the epoch's durable listeners. The feed of
  // subscriptions and metrics: every committed change, as its final value. An observer must
  // be quick (it delays the next commit) and must not call back into the committer.
  using CommitObserver = std::function<void(const CommitBatch& batch, uint64_t commit_micros)>;
  void AddCommitObserver(CommitObserver observer);

  void Start();

  // Commits whatever is left (fsync'd, whatever the mode), writes a last checkpoint and
  // joins the threads.
  void Stop();

  // Writes a checkpoint now and waits for it. For tests and tools.
  Status CheckpointNow();

  // Wakes the committer: something was written. Cheap when a wake-up is already pending.
  // Sync mode with commit_on_waiting_thread: nothing (whoever waits commits, TryCommitNow).
  // Async mode with it: sets the flag CommitWrittenInline consumes at the end of a turn.
  // Without it: wakes the committer thread.
  void RequestCommit();

  // Commits everything written so far on the calling thread, and announces it. Returns
  // false, at once, when another thread is committing: its announcement follows, and
  // whatever it did not include needs another call then.
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
  // Drains and writes one batch; false when there was nothing to write.
  // REQUIRES: commit_mutex_ held.
  bool CommitOnce(bool sync);

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

  std::mutex commit_mutex_;  // held by the one thread committing
  CommitBatch batch_;        // guarded by commit_mutex_
  // Async commits written but not yet fsync'd. Written under commit_mutex_, read anywhere.
  std::atomic<bool> unsynced_{false};
  mutable std::mutex stats_mutex_;
  CommitStats stats_;  // guarded by stats_mutex_
};

}  // namespace tally::engine
