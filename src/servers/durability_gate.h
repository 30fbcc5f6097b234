// DurabilityGate: "wait until durable, then reply", once for every server. It holds one event
// loop's replies until the commit epoch each depends on is durable (sync mode), then releases
// them. The Redis and HTTP workers each own one; neither the gate nor its waiters know the
// event loop (Asio or another): the loop gives the gate a way to be woken, and calls Settle().
//
// Threads. Everything but OnDurable() runs on the loop's thread. OnDurable() runs on whichever
// thread announced a durable epoch (the committer's listener, DurableListener below: in sync
// mode the committer's sync thread, once its fdatasync returned); it reads two atomics and at
// most calls `wake` once, which must make the loop's thread call Settle() soon without
// blocking (post to the loop).
//
// A turn. The loop Admit()s each waiter whose replies are ready; one already durable is
// released at once. At the end of its turn the loop calls Settle(): with inline group commit
// (Committer::commits_on_waiting_thread, sync mode) it writes the commit on its own thread
// first (drain and write(2): no hand-off for the write), then releases every waiter already
// durable. The fdatasync of that commit runs on the committer's sync thread while the loop
// goes on with its next turn (parsing and applying the requests of the next commit), so the
// waiters of this commit stay held: the sync thread's announcement wakes the loop through
// `wake`, and that Settle releases them. The same holds for a waiter whose epoch another
// thread was writing.
//
// Why no waiter is forgotten. Settle() stores has_waiting_ = true, issues a seq_cst fence,
// then reads each waiter's epoch against the durable epoch. The committer stores the durable
// epoch before it announces it; OnDurable() issues a seq_cst fence, then reads has_waiting_.
// The two fences are ordered one way or the other: if Settle's comes first, OnDurable sees
// has_waiting_ and wakes the loop; if OnDurable's comes first, Settle reads the new epoch and
// releases. notice_pending_ (a wake is on its way) follows the same pairing: Settle clears it
// before its fence, so an announcement that found it set and woke nobody announced an epoch
// that Settle reads.
//
// No wake-up per announcement. A loop with nothing held is not woken (has_waiting_ is false);
// a loop with a wake on its way is not woken again (notice_pending_); an announcement made
// while the loop writes its own commit in Settle does not wake it (Settle is about to look
// at every waiter anyway). A loop whose replies wait is woken once per fdatasync that makes
// them durable.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/engine.h"

namespace tally::servers {

class DurabilityGate;

// What a gate holds: a connection whose replies wait for durability. Both calls run on the
// loop's thread.
class DurabilityWaiter {
 public:
  // The commit epoch that must be durable before the replies may leave. It may rise while the
  // waiter is held (a Redis connection goes on running requests); 0 when nothing needs waiting
  // for (the connection closed meanwhile).
  virtual uint64_t required_epoch() const = 0;
  // The replies may leave now. REQUIRES: no call into the gate (it is iterating its waiters).
  virtual void ReleaseReplies() = 0;

 protected:
  ~DurabilityWaiter() = default;

 private:
  friend class DurabilityGate;
  bool held_ = false;  // in a gate's list: admitted once until released
};

class DurabilityGate {
 public:
  // `engine` must outlive the gate. `wake`: see the threads above.
  DurabilityGate(engine::Engine& engine, std::function<void()> wake);
  ~DurabilityGate();
  DurabilityGate(const DurabilityGate&) = delete;
  DurabilityGate& operator=(const DurabilityGate&) = delete;

  // Async mode: writes what this thread changed to the commit log (no fsync) before any reply
  // leaves, so that a crash of the process cannot lose an acknowledged change. Nothing in sync
  // mode (Settle commits). Loop thread.
  void LogAsyncWrites();

  // Releases `waiter` now when its epoch is durable; else holds it (once: a waiter already
  // held stays as it is) until a Settle() finds it durable. True when held: the loop must call
  // Settle() before its turn ends. Loop thread. A template so that a loop's own connection
  // type is checked without a virtual call or a reference count when it need not wait.
  template <typename Waiter>
  bool Admit(const std::shared_ptr<Waiter>& waiter);

  // The end of a turn: writes the commit on this thread (inline group commit; the sync thread
  // fsyncs it), then releases every held waiter whose epoch is durable. Loop thread.
  void Settle();

  // Drops every held waiter unreleased (the loop stops). Loop thread.
  void Clear();

  size_t held() const { return waiting_.size(); }

  // A new epoch is durable. Any thread; cheap when nothing is held.
  void OnDurable();

 private:
  void Hold(std::shared_ptr<DurabilityWaiter> waiter);

  engine::Engine& engine_;
  const std::function<void()> wake_;
  std::vector<std::shared_ptr<DurabilityWaiter>> waiting_;  // loop thread only
  // A wake is on its way to the loop: further announcements need not send another.
  std::atomic<bool> notice_pending_{false};
  // Some waiter is held. Set by the loop before it last reads the durable epoch, read by
  // OnDurable after the epoch moved.
  std::atomic<bool> has_waiting_{false};
};

template <typename Waiter>
bool DurabilityGate::Admit(const std::shared_ptr<Waiter>& waiter) {
  DurabilityWaiter& held = *waiter;
  if (held.held_) return false;
  if (engine_.IsDurable(waiter->required_epoch())) {
    waiter->ReleaseReplies();
    return false;
  }
  Hold(waiter);
  return true;
}

// DurableListener: tells a server's gates of every durable epoch, through one listener on the
// committer. The committer keeps its listeners for the engine's lifetime, which may be longer
// than the server's: the listener reaches the gates through a shared list that Detach()
// empties under a mutex, so that no announcement reaches a gate once Detach() returned.
class DurableListener {
 public:
  DurableListener();
  ~DurableListener();  // Detaches.
  DurableListener(const DurableListener&) = delete;
  DurableListener& operator=(const DurableListener&) = delete;

  // Registers the listener with `committer` (once per DurableListener). The gates must stay
  // until Detach().
  void Attach(engine::Committer& committer, std::vector<DurabilityGate*> gates);
  void Detach();

 private:
  struct Gates {
    std::mutex mutex;
    std::vector<DurabilityGate*> gates;  // guarded by mutex
  };
  std::shared_ptr<Gates> gates_;
};

}  // namespace tally::servers
