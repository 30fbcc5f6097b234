// The durability gate against a real Engine over a store in a temporary directory, with
// waiters that count their releases and a wake that counts its calls (no event loop).
#include "servers/durability_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "core/test_dir.h"
#include "engine/increment_buffer.h"
#include "storage/rocksdb_store.h"

namespace tally::servers {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();  // an epoch never durable

class CountingWaiter final : public DurabilityWaiter {
 public:
  explicit CountingWaiter(uint64_t epoch) : epoch_(epoch) {}
  uint64_t required_epoch() const override { return epoch_; }
  void ReleaseReplies() override { ++releases; }

  uint64_t epoch_;
  int releases = 0;
};

class DurabilityGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDirectory("tally_gate_test_");
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    gate_.reset();
    if (engine_) engine_->Stop();
    engine_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Open(engine::Durability durability) {
    auto store = storage::RocksDbStore::Open({.path = dir_.string()});
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
    engine::EngineOptions options;
    options.commit.durability = durability;
    engine_ = std::make_unique<engine::Engine>(store_.get(), options);
    ASSERT_TRUE(engine_->Start());
    gate_ = std::make_unique<DurabilityGate>(*engine_, [this] { ++wakes_; });
  }

  // Increments a counter as a worker does; returns the epoch its reply needs.
  uint64_t Write() {
    engine::IncrementBuffer buffer(&engine_->keyspace());
    buffer.Add(engine::HashedKey("k"), 1);
    return buffer.Publish();
  }

  std::filesystem::path dir_;
  std::unique_ptr<storage::RocksDbStore> store_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<DurabilityGate> gate_;
  // Waits (bounded) until `wake` was called `count` times: a commit announced on the committer
  // thread calls it just after the durable epoch moved, which WaitDurable may see first.
  bool WakesReach(int count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (wakes_.load() < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  std::atomic<int> wakes_{0};  // the committer thread may call `wake`
};

TEST_F(DurabilityGateTest, ADurableWaiterIsReleasedAtOnce) {
  Open(engine::Durability::kSync);
  auto waiter = std::make_shared<CountingWaiter>(0);
  EXPECT_FALSE(gate_->Admit(waiter));
  EXPECT_EQ(waiter->releases, 1);
  EXPECT_EQ(gate_->held(), 0u);
  gate_->OnDurable();
  EXPECT_EQ(wakes_, 0);  // nothing held: an announcement wakes nobody
}

TEST_F(DurabilityGateTest, AWaiterIsHeldOnceAndReleasedWhenDurable) {
  Open(engine::Durability::kSync);
  auto waiter = std::make_shared<CountingWaiter>(kNever);
  EXPECT_TRUE(gate_->Admit(waiter));
  EXPECT_FALSE(gate_->Admit(waiter));  // already held
  EXPECT_EQ(gate_->held(), 1u);
  gate_->Settle();
  EXPECT_EQ(waiter->releases, 0);
  EXPECT_EQ(gate_->held(), 1u);

  // Its epoch may move while it is held; a Settle reads it again and commits this thread's
  // writes itself (inline group commit).
  waiter->epoch_ = Write();
  gate_->Settle();
  if (gate_->held() != 0) {
    // The committer thread's sweep was committing meanwhile: its announcement would wake
    // the loop, whose next Settle releases.
    engine_->committer().WaitDurable(waiter->epoch_);
    gate_->Settle();
  }
  EXPECT_EQ(waiter->releases, 1);
  EXPECT_EQ(gate_->held(), 0u);
  EXPECT_TRUE(gate_->Admit(std::make_shared<CountingWaiter>(kNever)));
}

TEST_F(DurabilityGateTest, OneWakePerSettleAndNoneWithNothingHeld) {
  Open(engine::Durability::kSync);
  auto waiter = std::make_shared<CountingWaiter>(kNever);
  gate_->OnDurable();
  EXPECT_EQ(wakes_, 0);
  ASSERT_TRUE(gate_->Admit(waiter));
  gate_->Settle();  // marks the gate as holding
  gate_->OnDurable();
  gate_->OnDurable();
  EXPECT_EQ(wakes_, 1);  // a wake is on its way: no second one
  gate_->Settle();
  gate_->OnDurable();
  EXPECT_EQ(wakes_, 2);
  waiter->epoch_ = 0;  // say, its connection closed
  gate_->Settle();
  EXPECT_EQ(waiter->releases, 1);
  gate_->OnDurable();
  EXPECT_EQ(wakes_, 2);
}

TEST_F(DurabilityGateTest, ClearDropsWaitersUnreleased) {
  Open(engine::Durability::kSync);
  auto waiter = std::make_shared<CountingWaiter>(kNever);
  ASSERT_TRUE(gate_->Admit(waiter));
  gate_->Settle();
  gate_->Clear();
  EXPECT_EQ(gate_->held(), 0u);
  EXPECT_EQ(waiter->releases, 0);
  gate_->OnDurable();
  EXPECT_EQ(wakes_, 0);
  EXPECT_TRUE(gate_->Admit(waiter));  // may be held again
}

TEST_F(DurabilityGateTest, InAsyncModeNothingWaits) {
  Open(engine::Durability::kAsync);
  auto waiter = std::make_shared<CountingWaiter>(kNever);
  Write();
  gate_->LogAsyncWrites();
  EXPECT_FALSE(gate_->Admit(waiter));
  EXPECT_EQ(waiter->releases, 1);
  gate_->OnDurable();
  EXPECT_EQ(wakes_, 0);
}

TEST_F(DurabilityGateTest, TheListenerWakesGatesUntilDetached) {
  Open(engine::Durability::kSync);
  DurableListener listener;
  listener.Attach(engine_->committer(), {gate_.get()});
  auto waiter = std::make_shared<CountingWaiter>(kNever);
  ASSERT_TRUE(gate_->Admit(waiter));
  gate_->Settle();
  engine_->committer().WaitDurable(Write());
  EXPECT_TRUE(WakesReach(1));
  EXPECT_EQ(wakes_, 1);

  gate_->Settle();  // the loop took the wake
  listener.Detach();
  engine_->committer().WaitDurable(Write());
  EXPECT_EQ(wakes_, 1);
}

}  // namespace
}  // namespace tally::servers
