// Follower against three real nats-servers (an R3 stream, started by each test): what an
// owner's PartitionLog publishes is applied in order exactly once; a group only whole, never
// its parts alone, and not at all when a claim cut it short; a restart from a saved position
// applies only what follows; a purged range stops the follower.
#include "cluster/follower.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/partition_test_support.h"
#include "core/clock.h"
#include "engine/keyspace.h"

namespace tally::cluster {
namespace {

using namespace std::chrono_literals;
using engine::CommitBatch;
using engine::CounterRecord;

// Records every Apply call (the epochs of its batches, in order) and keeps a model of the
// partition's counters. Thread-safe.
class RecordingApplier final : public BatchApplier {
 public:
  void Apply(uint32_t partition, std::span<const CommitBatch* const> batches,
             const std::function<void()>& applied) override {
    std::lock_guard lock(mutex_);
    EXPECT_EQ(partition, 0u);
    std::vector<uint64_t> epochs;
    for (const CommitBatch* batch : batches) {
      epochs.push_back(batch->epoch());
      if (batch->clear_all()) values_.clear();
      for (size_t i = 0; i < batch->delete_count(); ++i) {
        values_.erase(std::string(batch->delete_key(i)));
      }
      for (size_t i = 0; i < batch->put_count(); ++i) {
        values_[std::string(batch->put_key(i))] = batch->put_record(i).value;
      }
    }
    calls_.push_back(std::move(epochs));
    applied();
  }

  std::vector<std::vector<uint64_t>> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  std::map<std::string, int64_t> values() const {
    std::lock_guard lock(mutex_);
    return values_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::vector<uint64_t>> calls_;
  std::map<std::string, int64_t> values_;
};

class FollowerTest : public PartitionStreamTest {
 protected:
  static FollowerOptions Options() {
    FollowerOptions options;
    options.stream = kStream;
    options.subject = kSubject;
    options.poll_ms = 50;
    return options;
  }

  // Starts a follower; JetStream's API may not answer for a moment on a busy machine (no
  // meta leader yet), which is retried for up to 20 s.
  std::unique_ptr<Follower> Follow(BatchApplier& applier, FollowerPosition from = {}) {
    auto follower = Follower::Start(*connection_, Options(), from, applier);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!follower && follower.error().code == ErrorCode::kUnavailable &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100ms);
      follower = Follower::Start(*connection_, Options(), from, applier);
    }
    EXPECT_TRUE(follower) << follower.error().message;
    return follower ? std::move(*follower) : nullptr;
  }

  // Starts a follower applying to applier_ from the stream's start, then an owner "node-a"
  // that claims the partition.
  void FollowAndClaim(std::unique_ptr<Follower>* follower, Owner* owner) {
    *follower = Follow(applier_);
    ASSERT_NE(*follower, nullptr);
    *owner = Claim(*connection_, 4, "node-a");
    ASSERT_NE(owner->log, nullptr);
  }

  // Appends epoch `epoch` of the owner: puts of `puts` (key, value), as a record of `kind`.
  static uint64_t Append(Owner& owner, uint64_t epoch,
                         const std::vector<std::pair<std::string, int64_t>>& puts,
                         RecordKind kind = RecordKind::kBatch) {
    CommitBatch batch;
    for (const auto& [key, value] : puts) batch.AddPut(key, CounterRecord{value, 0});
    owner.header.epoch = epoch;
    auto seq = AppendBatch(owner, batch, kind);
    EXPECT_TRUE(seq) << seq.error().message;
    return seq ? *seq : 0;
  }

  // Waits until the owner's records up to `seq` are in the stream.
  static void Durable(Owner& owner, uint64_t seq) {
    const PartitionLogProgress progress = owner.log->WaitDurable(seq, 20s);
    ASSERT_GE(progress.durable_seq, seq);
  }

  // Waits (at most 20 s) until the follower has read `count` records.
  static void WaitRecords(const Follower& follower, uint64_t count) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (follower.stats().records < count && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(follower.stats().records, count);
  }

  RecordingApplier applier_;
};

TEST_F(FollowerTest, AppliesAnOwnersBatchesInOrderExactlyOnce) {
  std::unique_ptr<Follower> follower;
  Owner owner;
  ASSERT_NO_FATAL_FAILURE(FollowAndClaim(&follower, &owner));
  RecordingApplier& applier = applier_;
  constexpr uint64_t kBatches = 60;
  uint64_t last = 0;
  for (uint64_t n = 1; n <= kBatches; ++n) {
    last = Append(owner, n, {{"n", static_cast<int64_t>(n)}, {"k" + std::to_string(n % 7), 1}});
  }
  ASSERT_EQ(last, kBatches + 1);  // after the claim at 1

  const FollowerPosition position = follower->WaitApplied(last, 20s);
  EXPECT_EQ(position, (FollowerPosition{last, 1, owner.header.writer}));
  EXPECT_EQ(follower->state(), FollowerState::kFollowing);
  const std::vector<std::vector<uint64_t>> calls = applier.calls();
  ASSERT_EQ(calls.size(), kBatches);
  for (uint64_t n = 1; n <= kBatches; ++n) {
    EXPECT_EQ(calls[n - 1], std::vector<uint64_t>{n}) << "call " << n;
  }
  const std::map<std::string, int64_t> values = applier.values();
  EXPECT_EQ(values.at("n"), static_cast<int64_t>(kBatches));
  EXPECT_EQ(values.size(), 8u);

  const PartitionOwner seen = follower->owner();
  EXPECT_EQ(seen.term, 1u);
  EXPECT_EQ(seen.claim.node_name, "node-a");
  EXPECT_EQ(seen.last_record_seq, last);
  const FollowerStats stats = follower->stats();
  EXPECT_EQ(stats.records, kBatches + 1);
  EXPECT_EQ(stats.applied_records, kBatches);
  EXPECT_EQ(stats.claims, 1u);
  EXPECT_EQ(stats.skipped, 0u);
}

TEST_F(FollowerTest, AGroupIsAppliedOnlyWhole) {
  std::unique_ptr<Follower> follower;
  Owner owner;
  ASSERT_NO_FATAL_FAILURE(FollowAndClaim(&follower, &owner));
  RecordingApplier& applier = applier_;
  const uint64_t first = Append(owner, 1, {{"a", 1}});
  Append(owner, 2, {{"a", 2}, {"b", 2}}, RecordKind::kPart);
  const uint64_t second_part = Append(owner, 3, {{"c", 3}}, RecordKind::kPart);
  Durable(owner, second_part);

  // The parts at the tail are read and held; the position stays before them.
  WaitRecords(*follower, 4);
  EXPECT_EQ(follower->pending_parts(), 2u);
  EXPECT_EQ(follower->position().seq, first);
  EXPECT_EQ(applier.calls(), (std::vector<std::vector<uint64_t>>{{1}}));
  EXPECT_EQ(applier.values(), (std::map<std::string, int64_t>{{"a", 1}}));

  const uint64_t last = Append(owner, 4, {{"a", 4}});
  EXPECT_EQ(follower->WaitApplied(last, 20s).seq, last);
  EXPECT_EQ(applier.calls(), (std::vector<std::vector<uint64_t>>{{1}, {2, 3, 4}}));
  EXPECT_EQ(applier.values(), (std::map<std::string, int64_t>{{"a", 4}, {"b", 2}, {"c", 3}}));
  EXPECT_EQ(follower->pending_parts(), 0u);
  EXPECT_EQ(follower->stats().applied_records, 4u);
  EXPECT_EQ(follower->stats().applied_groups, 2u);
}

TEST_F(FollowerTest, AGroupCutShortByAClaimIsNeverApplied) {
  std::unique_ptr<Follower> follower;
  Owner a;
  ASSERT_NO_FATAL_FAILURE(FollowAndClaim(&follower, &a));
  RecordingApplier& applier = applier_;
  Append(a, 1, {{"x", 1}});
  Append(a, 2, {{"x", 100}}, RecordKind::kPart);
  Durable(a, Append(a, 3, {{"y", 100}}, RecordKind::kPart));
  a.log.reset();  // died before the group's last record

  Owner b = Claim(*connection_, 4, "node-b");
  ASSERT_NE(b.log, nullptr);
  const uint64_t last = Append(b, 1, {{"z", 7}});
  ASSERT_EQ(last, 6u);
  EXPECT_EQ(follower->WaitApplied(last, 20s), (FollowerPosition{6, 5, b.header.writer}));
  EXPECT_EQ(applier.calls(), (std::vector<std::vector<uint64_t>>{{1}, {1}}));
  EXPECT_EQ(applier.values(), (std::map<std::string, int64_t>{{"x", 1}, {"z", 7}}));
  const PartitionOwner seen = follower->owner();
  EXPECT_EQ(seen.term, 5u);
  EXPECT_EQ(seen.claim.node_name, "node-b");
  EXPECT_EQ(follower->stats().dropped_parts, 2u);
  EXPECT_EQ(follower->stats().claims, 2u);
}

// The first follower applies to an engine's keyspace and stops while a group is incomplete;
// the second starts from its saved position: it applies what followed, the group whole.
TEST_F(FollowerTest, ARestartFromASavedPositionAppliesOnlyWhatFollows) {
  ManualClock clock(1'700'000'000'000);
  engine::Keyspace keyspace(&clock);
  KeyspaceApplier to_keyspace(keyspace, 1);
  Owner owner = Claim(*connection_, 4, "node-a");
  ASSERT_NE(owner.log, nullptr);
  uint64_t seq = 0;
  for (uint64_t n = 1; n <= 10; ++n) seq = Append(owner, n, {{"n", static_cast<int64_t>(n)}});
  Append(owner, 11, {{"g", 11}}, RecordKind::kPart);
  Durable(owner, Append(owner, 12, {{"g", 12}}, RecordKind::kPart));

  FollowerPosition saved;
  {
    std::unique_ptr<Follower> first = Follow(to_keyspace);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->WaitApplied(seq, 20s).seq, seq);
    WaitRecords(*first, 13);
    saved = first->position();
  }
  EXPECT_EQ(saved, (FollowerPosition{seq, 1, owner.header.writer}));
  const engine::HashedKey n("n");
  const engine::HashedKey g("g");
  EXPECT_EQ(keyspace.Lock(n).Get(n), 10);
  EXPECT_EQ(keyspace.Lock(g).Get(g), std::nullopt);

  uint64_t last = Append(owner, 13, {{"g", 13}});
  for (uint64_t n = 14; n <= 20; ++n) last = Append(owner, n, {{"n", static_cast<int64_t>(n)}});
  RecordingApplier applier;
  std::unique_ptr<Follower> second = Follow(applier, saved);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->WaitApplied(last, 20s).seq, last);
  std::vector<std::vector<uint64_t>> want = {{11, 12, 13}};
  for (uint64_t n = 14; n <= 20; ++n) want.push_back({n});
  EXPECT_EQ(applier.calls(), want);
  EXPECT_EQ(applier.values(), (std::map<std::string, int64_t>{{"g", 13}, {"n", 20}}));
  EXPECT_EQ(second->owner().term, 1u);
}

TEST_F(FollowerTest, APurgedRangeStopsTheFollowerWithTheReason) {
  Owner owner = Claim(*connection_, 4, "node-a");
  ASSERT_NE(owner.log, nullptr);
  uint64_t seq = 0;
  for (uint64_t n = 1; n <= 5; ++n) seq = Append(owner, n, {{"n", static_cast<int64_t>(n)}});
  Durable(owner, seq);
  ASSERT_TRUE(connection_->PurgeStream(kStream, 4));

  RecordingApplier applier;
  std::unique_ptr<Follower> follower = Follow(applier);
  ASSERT_NE(follower, nullptr);
  follower->WaitApplied(seq, 20s);
  EXPECT_EQ(follower->state(), FollowerState::kStopped);
  const Status reason = follower->stop_reason();
  ASSERT_FALSE(reason);
  EXPECT_EQ(reason.error().message,
            "partition 0: stream TALLY_P0 no longer holds sequences 1 to 3 (purged before this "
            "node applied them)");
  EXPECT_EQ(follower->position().seq, 0u);
  EXPECT_TRUE(applier.calls().empty());
}

}  // namespace
}  // namespace tally::cluster
