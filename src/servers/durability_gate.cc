#include "servers/durability_gate.h"

namespace tally::servers {

DurabilityGate::DurabilityGate(engine::Engine& engine, std::function<void()> wake)
    : engine_(engine), wake_(std::move(wake)) {}

DurabilityGate::~DurabilityGate() = default;

void DurabilityGate::LogAsyncWrites() {
  if (engine_.durability() == engine::Durability::kAsync) {
    engine_.committer().CommitWrittenInline();
  }
}

void DurabilityGate::Hold(std::shared_ptr<DurabilityWaiter> waiter) {
  waiter->held_ = true;
  waiting_.push_back(std::move(waiter));
}

void DurabilityGate::Settle() {
  notice_pending_.store(false, std::memory_order_relaxed);
  if (waiting_.empty()) return;
  engine::Committer& committer = engine_.committer();
  if (committer.commits_on_waiting_thread()) {
    // An announcement made meanwhile need not wake us: every waiter is looked at right below.
    // (This commit's own comes later, from the sync thread, and wakes us then.)
    notice_pending_.store(true, std::memory_order_relaxed);
    committer.TryCommitNow();
    notice_pending_.store(false, std::memory_order_relaxed);
  }
  has_waiting_.store(true, std::memory_order_relaxed);
  // Pairs with the fence in OnDurable (see the header): either the reads below see the epoch
  // that call announces, or that call sees has_waiting_ and wakes the loop.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  size_t kept = 0;
  for (auto& waiter : waiting_) {
    if (engine_.IsDurable(waiter->required_epoch())) {
      waiter->held_ = false;
      waiter->ReleaseReplies();
      waiter.reset();
    } else {
      waiting_[kept++] = std::move(waiter);
    }
  }
  waiting_.resize(kept);
  if (kept == 0) has_waiting_.store(false, std::memory_order_relaxed);
}

void DurabilityGate::Clear() {
  for (const auto& waiter : waiting_) waiter->held_ = false;
  waiting_.clear();
  has_waiting_.store(false, std::memory_order_relaxed);
}

void DurabilityGate::OnDurable() {
  // In async mode no reply waits for durability.
  if (engine_.durability() == engine::Durability::kAsync) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!has_waiting_.load(std::memory_order_relaxed)) return;
  // One wake per Settle is enough: it looks at every waiter.
  if (notice_pending_.exchange(true, std::memory_order_acq_rel)) return;
  wake_();
}

DurableListener::DurableListener() : gates_(std::make_shared<Gates>()) {}

DurableListener::~DurableListener() { Detach(); }

void DurableListener::Attach(engine::Committer& committer, std::vector<DurabilityGate*> gates) {
  {
    std::lock_guard lock(gates_->mutex);
    gates_->gates = std::move(gates);
  }
  committer.AddDurableListener([shared = gates_](uint64_t) {
    std::lock_guard lock(shared->mutex);
    for (DurabilityGate* gate : shared->gates) gate->OnDurable();
  });
}

void DurableListener::Detach() {
  std::lock_guard lock(gates_->mutex);
  gates_->gates.clear();
}

}  // namespace tally::servers
