// What a follower applies to the keyspace (cluster/follower.h): View::Put of final values and
// deadlines, ApplyReplicated of whole groups of batches with a partition's clear, and the
// hooks that run while every stripe is held (ApplyReplicated's, TakeCheckpoint's).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/slot.h"
#include "engine/keyspace.h"
#include "engine/keyspace_test_fixture.h"

namespace tally::engine {
namespace {

void PutRecord(Keyspace& keyspace, std::string_view k, CounterRecord record) {
  const HashedKey key(k);
  keyspace.Lock(key).Put(key, record);
}

// The first `n` keys `prefix`0, `prefix`1, ... whose slot falls in `partition` of `count`.
std::vector<std::string> KeysInPartition(uint32_t partition, uint32_t count, size_t n,
                                         const std::string& prefix) {
  std::vector<std::string> keys;
  for (size_t i = 0; keys.size() < n; ++i) {
    std::string key = prefix + std::to_string(i);
    if (SlotPartition(KeySlot(key), count) == partition) keys.push_back(std::move(key));
  }
  return keys;
}

// Keys of two partitions, set and drained: `mine` to 1, `others` to 2.
struct TwoPartitions {
  std::vector<std::string> mine;
  std::vector<std::string> others;
};

class KeyspaceSlotsTest : public KeyspaceTest {
 protected:
  // `n` keys of partition `mine_at` and `n` of `others_at`, of `count` partitions.
  TwoPartitions SetTwoPartitions(uint32_t mine_at, uint32_t others_at, uint32_t count, size_t n) {
    TwoPartitions keys{KeysInPartition(mine_at, count, n, "m"),
                       KeysInPartition(others_at, count, n, "o")};
    for (const std::string& key : keys.mine) EXPECT_TRUE(Set(key, 1).applied);
    for (const std::string& key : keys.others) EXPECT_TRUE(Set(key, 2).applied);
    EXPECT_TRUE(Drain().closed);
    return keys;
  }
};

TEST_F(KeyspaceTest, PutSetsTheFinalValueAndDeadlineWhateverTheKeyHeld) {
  ASSERT_TRUE(SetWithDeadline("k", 5, kStart + 9000).applied);
  PutRecord(keyspace_, "k", {7, 0});
  EXPECT_EQ(Get("k"), 7);
  EXPECT_EQ(Deadline("k"), -1);
  PutRecord(keyspace_, "k", {-3, kStart + 1000});
  EXPECT_EQ(Get("k"), -3);
  EXPECT_EQ(Deadline("k"), kStart + 1000);
  PutRecord(keyspace_, "new", {INT64_MIN, 0});
  EXPECT_EQ(Get("new"), INT64_MIN);

  const Drained first = Drain();
  ASSERT_TRUE(first.closed);
  EXPECT_TRUE(first.deletes.empty());
  ASSERT_EQ(first.puts.size(), 2u);
  EXPECT_EQ(first.puts.at("k").value, -3);
  EXPECT_EQ(first.puts.at("k").deadline_ms, kStart + 1000);
  EXPECT_EQ(first.puts.at("new").value, INT64_MIN);

  // A deadline not in the future removes the key, and the store hears of it.
  PutRecord(keyspace_, "k", {1, kStart});
  EXPECT_EQ(Get("k"), std::nullopt);
  PutRecord(keyspace_, "never", {1, kStart - 1});
  EXPECT_EQ(Get("never"), std::nullopt);
  const Drained second = Drain();
  EXPECT_EQ(second.deletes, std::vector<std::string>{"k"});
  EXPECT_TRUE(second.puts.empty());
  EXPECT_EQ(keyspace_.size(), 1u);
}

TEST_F(KeyspaceTest, ApplyReplicatedAppliesBatchesInOrderAsOneEpoch) {
  ASSERT_TRUE(Set("gone", 9).applied);
  CommitBatch one;
  one.AddPut("a", {1, 0});
  one.AddPut("b", {2, kStart + 500});
  one.AddDelete("gone");
  CommitBatch two;
  two.AddDelete("a");
  two.AddPut("b", {5, 0});
  two.AddPut("c", {-8, 0});
  const std::vector<const CommitBatch*> batches = {&one, &two};
  int held_calls = 0;
  keyspace_.ApplyReplicated(PartitionSlots(0, 1), batches, [&] { ++held_calls; });
  EXPECT_EQ(held_calls, 1);
  EXPECT_EQ(Get("a"), std::nullopt);
  EXPECT_EQ(Get("b"), 5);
  EXPECT_EQ(Deadline("b"), -1);
  EXPECT_EQ(Get("c"), -8);
  EXPECT_EQ(Get("gone"), std::nullopt);

  const Drained drained = Drain();
  ASSERT_TRUE(drained.closed);
  EXPECT_FALSE(drained.clear_all);
  std::vector<std::string> deletes = drained.deletes;  // in stripe order
  std::sort(deletes.begin(), deletes.end());
  EXPECT_EQ(deletes, (std::vector<std::string>{"a", "gone"}));
  ASSERT_EQ(drained.puts.size(), 2u);
  EXPECT_EQ(drained.puts.at("b").value, 5);
  EXPECT_EQ(drained.puts.at("b").deadline_ms, 0);
  EXPECT_EQ(drained.puts.at("c").value, -8);
  EXPECT_FALSE(Drain().closed);
}

TEST_F(KeyspaceSlotsTest, ApplyReplicatedClearsOnlyThePartitionsSlots) {
  const auto [mine, others] = SetTwoPartitions(1, 2, 4, 20);

  CommitBatch clear;
  clear.ClearAll();
  clear.AddPut(mine[0], {42, 0});
  const std::vector<const CommitBatch*> batches = {&clear};
  keyspace_.ApplyReplicated(PartitionSlots(1, 4), batches);

  EXPECT_EQ(Get(mine[0]), 42);
  for (size_t i = 1; i < mine.size(); ++i) EXPECT_EQ(Get(mine[i]), std::nullopt) << mine[i];
  for (const std::string& key : others) EXPECT_EQ(Get(key), 2) << key;
  EXPECT_EQ(keyspace_.size(), others.size() + 1);

  // The store deletes the cleared keys one by one: another partition's rows stay.
  const Drained drained = Drain();
  EXPECT_FALSE(drained.clear_all);
  EXPECT_EQ(drained.deletes.size(), mine.size());
  ASSERT_EQ(drained.puts.size(), 1u);
  EXPECT_EQ(drained.puts.at(mine[0]).value, 42);
}

TEST_F(KeyspaceSlotsTest, DropSlotsForgetsAPartitionWithoutTellingTheStore) {
  const auto [mine, others] = SetTwoPartitions(0, 2, 3, 30);
  ASSERT_TRUE(Delete(mine[0]));  // a deletion not drained yet: dropped too
  ASSERT_TRUE(Delete(others[0]));

  EXPECT_EQ(keyspace_.DropSlots(PartitionSlots(0, 3)), mine.size() - 1);
  for (const std::string& key : mine) EXPECT_EQ(Get(key), std::nullopt) << key;
  for (size_t i = 1; i < others.size(); ++i) EXPECT_EQ(Get(others[i]), 2) << others[i];
  const Drained drained = Drain();
  EXPECT_EQ(drained.deletes, std::vector<std::string>{others[0]});
  EXPECT_TRUE(drained.puts.empty());
  // The next checkpoint writes nothing of the dropped partition.
  Keyspace::CheckpointCursor cursor = keyspace_.TakeCheckpoint();
  CommitBatch batch;
  while (keyspace_.ReadCheckpoint(cursor, 1000, &batch)) {
  }
  for (size_t i = 0; i < batch.put_count(); ++i) {
    EXPECT_NE(SlotPartition(KeySlot(batch.put_key(i)), 3), 0u) << batch.put_key(i);
  }
  for (size_t i = 0; i < batch.delete_count(); ++i) {
    EXPECT_NE(SlotPartition(KeySlot(batch.delete_key(i)), 3), 0u) << batch.delete_key(i);
  }
  EXPECT_EQ(batch.put_count(), others.size() - 1);
}

TEST_F(KeyspaceSlotsTest, DropSlotsOfSeveralRangesForgetsThemAllAndNothingElse) {
  const auto [first, second] = SetTwoPartitions(0, 2, 4, 20);
  const std::vector<std::string> kept = KeysInPartition(3, 4, 20, "k");
  for (const std::string& key : kept) ASSERT_TRUE(Set(key, 3).applied);
  const SlotRange ranges[] = {PartitionSlots(0, 4), PartitionSlots(2, 4)};
  EXPECT_EQ(keyspace_.DropSlots(ranges), first.size() + second.size());
  for (const std::string& key : first) EXPECT_EQ(Get(key), std::nullopt) << key;
  for (const std::string& key : second) EXPECT_EQ(Get(key), std::nullopt) << key;
  for (const std::string& key : kept) EXPECT_EQ(Get(key), 3) << key;
}

TEST_F(KeyspaceSlotsTest, RequireCheckpointOfMarksOnlyThosePartitionsCounters) {
  const auto [mine, others] = SetTwoPartitions(1, 2, 4, 25);
  const auto read_all = [&] {
    Keyspace::CheckpointCursor cursor = keyspace_.TakeCheckpoint();
    EXPECT_FALSE(cursor.clear_all);
    CommitBatch batch;
    while (keyspace_.ReadCheckpoint(cursor, 1000, &batch)) {
    }
    return batch;
  };
  EXPECT_EQ(read_all().put_count(), mine.size() + others.size());
  EXPECT_EQ(read_all().put_count(), 0u);  // nothing marked since

  const SlotRange ranges[] = {PartitionSlots(1, 4)};
  keyspace_.RequireCheckpointOf(ranges);
  const CommitBatch batch = read_all();
  ASSERT_EQ(batch.put_count(), mine.size());
  for (size_t i = 0; i < batch.put_count(); ++i) {
    EXPECT_EQ(SlotPartition(KeySlot(batch.put_key(i)), 4), 1u) << batch.put_key(i);
    EXPECT_EQ(batch.put_record(i).value, 1);
  }
}

// Readers that take a group's keys together never see part of a group: each group sets every
// key to its number.
TEST_F(KeyspaceTest, ReadersNeverSeePartOfAReplicatedGroup) {
  const std::vector<std::string> names = {"g:a", "g:b", "g:c", "g:d"};
  const std::vector<HashedKey> keys(names.begin(), names.end());
  constexpr int64_t kGroups = 2000;
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!done.load()) {
      View view = keyspace_.Lock(keys);
      const std::optional<int64_t> first = view.Get(keys[0]);
      for (const HashedKey& key : keys) {
        if (view.Get(key) != first) torn.fetch_add(1);
      }
    }
  });
  for (int64_t n = 1; n <= kGroups; ++n) {
    // A group of two records, each setting half of the keys.
    CommitBatch one;
    one.AddPut(names[0], {n, 0});
    one.AddPut(names[1], {n, 0});
    CommitBatch two;
    two.AddPut(names[2], {n, 0});
    two.AddPut(names[3], {n, 0});
    const std::vector<const CommitBatch*> group = {&one, &two};
    keyspace_.ApplyReplicated(PartitionSlots(0, 1), group);
  }
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  for (const std::string& name : names) EXPECT_EQ(Get(name), kGroups);
}

// A reader started inside `while_held` must wait for the stripes: it finishes only after the
// call that ran the hook returned, and then reads the applied value.
TEST_F(KeyspaceTest, ApplyReplicatedRunsItsHookWithTheStripesHeld) {
  CommitBatch batch;
  batch.AddPut("x", {11, 0});
  const std::vector<const CommitBatch*> batches = {&batch};
  std::atomic<bool> read_done{false};
  std::optional<int64_t> read;
  bool done_inside = true;
  std::thread reader;
  keyspace_.ApplyReplicated(PartitionSlots(0, 1), batches, [&] {
    reader = std::thread([&] {
      read = Get("x");
      read_done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    done_inside = read_done.load();
  });
  reader.join();
  EXPECT_FALSE(done_inside);
  EXPECT_EQ(read, 11);
}

TEST_F(KeyspaceTest, TakeCheckpointRunsItsHookWithEveryStripeHeld) {
  ASSERT_TRUE(Set("y", 3).applied);
  ASSERT_TRUE(Drain().closed);
  std::atomic<bool> write_done{false};
  bool done_inside = true;
  int calls = 0;
  std::thread writer;
  Keyspace::CheckpointCursor cursor = keyspace_.TakeCheckpoint([&] {
    ++calls;
    writer = std::thread([&] {
      ASSERT_TRUE(Set("y", 4).applied);
      write_done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    done_inside = write_done.load();
  });
  writer.join();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(done_inside);
  // The checkpoint holds the marks taken at the cut and reads current values.
  CommitBatch batch;
  while (keyspace_.ReadCheckpoint(cursor, 100, &batch)) {
  }
  ASSERT_EQ(batch.put_count(), 1u);
  EXPECT_EQ(batch.put_key(0), "y");
  EXPECT_EQ(batch.put_record(0).value, 4);
}

}  // namespace
}  // namespace tally::engine
