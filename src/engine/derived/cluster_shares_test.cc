// What a cluster node's derived counters do (cluster/change_feed.h), without a cluster: a
// push's shares applied per partition with their position records, exactly once per
// partition; scripts run at a position of the change stream; a push planned before it is
// published; the families' indexes kept in step with replicated batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/derived/derived_counters.h"
#include "engine/derived/derived_keyspace.h"
#include "engine/derived/derived_test_util.h"

namespace tally::derived {
namespace {

constexpr std::string_view kSchema =
    "CREATE SOURCE likes (post_id bigint, blog_id bigint, weight bigint); "
    "CREATE COUNTER post_likes AS SELECT post_id, count(*) FROM likes GROUP BY post_id; "
    "CREATE COUNTER blog_weight AS SELECT blog_id, sum(weight) FROM likes GROUP BY blog_id;";

std::string Like(int post, int blog, int64_t weight) {
  return "{\"source\":\"likes\",\"new\":{\"post_id\":" + std::to_string(post) +
         ",\"blog_id\":" + std::to_string(blog) + ",\"weight\":" + std::to_string(weight) + "}}";
}

// Two partitions of the test: the groups of post 1 and blog 1 in partition 0, others in 1.
uint32_t PartitionOf(std::string_view key) {
  return key == "post_likes:1" || key == "blog_weight:1" ? 0 : 1;
}

class ClusterSharesTest : public DerivedStoreTest {
 protected:
  ClusterSharesTest() : DerivedStoreTest("tally_cluster_shares_test_", 1'700'000'000'000, {}) {}

  // Applies `body` at `position` to the shares of `partitions`.
  PushOutcome Apply(const std::string& body, int64_t position,
                    const std::vector<uint32_t>& partitions,
                    std::vector<uint32_t>* overflowed = nullptr) {
    std::vector<PartitionShare> shares;
    for (uint32_t p : partitions) shares.push_back({p, kNames[p], {}});
    auto outcome = derived_->ApplyShares(body, {}, ShareOrder{position, position, {}}, shares,
                                         PartitionOf, decoder_, overflowed);
    EXPECT_TRUE(outcome) << outcome.error().message;
    return outcome.value_or(PushOutcome{});
  }
  int64_t Position(uint32_t partition) { return Value(PositionKey(kNames[partition])); }

  // A source consumer's message at `seq` (the partitions' fences in play), to both partitions.
  PushOutcome ApplySource(const std::string& body, int64_t seq, SourceFence fence) {
    const ShareOrder order{seq, fence.lsn == 0 ? kPendingStart : fence.lsn, fence};
    auto outcome = derived_->ApplyShares(body, {}, order, Shares(), PartitionOf, decoder_, nullptr);
    EXPECT_TRUE(outcome) << outcome.error().message;
    return outcome.value_or(PushOutcome{});
  }
  std::vector<PartitionShare> Shares() {
    return {{0, kNames[0], kFences[0]}, {1, kNames[1], kFences[1]}};
  }

  static constexpr std::string_view kNames[] = {"{p0}changes", "{p1}changes"};
  static constexpr std::string_view kFences[] = {"{p0}source", "{p1}source"};
};

TEST_F(ClusterSharesTest, EachShareIsAppliedOnceWithItsPosition) {
  auto defined = derived_->ExecuteAt(kSchema, 1);
  ASSERT_TRUE(defined) << defined.error().message;
  const std::string body = "[" + Like(1, 1, 5) + "," + Like(2, 1, 7) + "," + Like(2, 2, 1) + "]";
  // Partition 0 only: post 1 and blog 1.
  PushOutcome outcome = Apply(body, 5, {0});
  EXPECT_EQ(outcome.increments, 2u);
  EXPECT_EQ(Value("post_likes:1"), 1);
  EXPECT_EQ(Value("blog_weight:1"), 12);
  EXPECT_EQ(Value("post_likes:2"), 0);
  EXPECT_EQ(Position(0), 5);
  EXPECT_EQ(Position(1), 0);
  // Again for both partitions (a node that gained partition 1 reads the stream again): only
  // partition 1's share is due.
  outcome = Apply(body, 5, {0, 1});
  EXPECT_EQ(Value("post_likes:1"), 1);
  EXPECT_EQ(Value("blog_weight:1"), 12);
  EXPECT_EQ(Value("post_likes:2"), 2);
  EXPECT_EQ(Value("blog_weight:2"), 1);
  EXPECT_EQ(Position(1), 5);
  // At or before the recorded positions nothing moves.
  Apply(body, 4, {0, 1});
  Apply(body, 5, {0, 1});
  EXPECT_EQ(Value("post_likes:2"), 2);
  // A counter created later in the stream counts only what follows it.
  ASSERT_TRUE(derived_->ExecuteAt(
      "CREATE COUNTER blog_likes AS SELECT blog_id, count(*) FROM likes GROUP BY blog_id;", 6));
  Apply("[" + Like(3, 2, 1) + "]", 7, {0, 1});
  EXPECT_EQ(Value("blog_likes:2"), 1);
  Apply("[" + Like(4, 2, 1) + "]", 6, {0, 1});  // not after its creation: skipped
  EXPECT_EQ(Value("blog_likes:2"), 1);
}

TEST_F(ClusterSharesTest, AShareThatWouldOverflowCountsNothingAndTheOthersApply) {
  ASSERT_TRUE(derived_->ExecuteAt(kSchema, 1));
  Apply("[" + Like(9, 1, INT64_MAX) + "]", 2, {0, 1});
  std::vector<uint32_t> overflowed;
  Apply("[" + Like(1, 1, 1) + "," + Like(2, 2, 3) + "]", 3, {0, 1}, &overflowed);
  EXPECT_EQ(overflowed, std::vector<uint32_t>{0});
  EXPECT_EQ(Value("blog_weight:1"), INT64_MAX);
  EXPECT_EQ(Value("post_likes:1"), 0);  // partition 0's share: nothing
  EXPECT_EQ(Value("blog_weight:2"), 3);
  EXPECT_EQ(Position(0), 3);
  EXPECT_EQ(Position(1), 3);
}

TEST_F(ClusterSharesTest, APushIsPlannedBeforeItIsPublished) {
  ASSERT_TRUE(derived_->ExecuteAt(kSchema, 1));
  size_t changes = 0;
  auto keys =
      derived_->PlanPush("[" + Like(1, 1, 2) + "," + Like(1, 2, 0) + "]", {}, decoder_, &changes);
  ASSERT_TRUE(keys) << keys.error().message;
  EXPECT_EQ(changes, 2u);
  std::sort(keys->begin(), keys->end());
  EXPECT_EQ(*keys, (std::vector<std::string>{"blog_weight:1", "post_likes:1"}));
  EXPECT_EQ(Value("post_likes:1"), 0);  // nothing written
  auto with_id = derived_->PlanPush(
      R"({"source":"likes","id":"x","new":{"post_id":1,"blog_id":1,"weight":1}})", {}, decoder_,
      &changes);
  ASSERT_FALSE(with_id);
  EXPECT_NE(with_id.error().message.find("give the push an id"), std::string::npos);
  auto distinct = derived_->ExecuteAt(
      "CREATE COUNTER fans AS SELECT blog_id, count(DISTINCT post_id) FROM likes GROUP BY "
      "blog_id;",
      9);
  ASSERT_FALSE(distinct);
  EXPECT_NE(distinct.error().message.find("plain counts"), std::string::npos);
}

TEST_F(ClusterSharesTest, TheIndexesFollowReplicatedBatches) {
  ASSERT_TRUE(derived_->ExecuteAt(kSchema, 1));
  engine::CommitBatch batch;
  batch.AddPut("post_likes:7", {3, 0});
  batch.AddPut("post_likes:8", {1, 0});
  batch.AddPut("unrelated", {1, 0});
  const engine::CommitBatch* batches[] = {&batch};
  engine_->keyspace().ApplyReplicated({0, kSlotCount - 1}, batches);
  derived_->OnReplicated(batches);
  derived_->OnReplicated(batches);  // the same groups again: listed once
  auto prefix = derived_->PrefixOf("post_likes", {});
  ASSERT_TRUE(prefix);
  auto page = derived_->List("post_likes", *prefix, {}, 10);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->items.size(), 2u);
  EXPECT_EQ(page->items[0].key, "post_likes:7");
  engine::CommitBatch deleted;
  deleted.AddDelete("post_likes:7");
  const engine::CommitBatch* deletes[] = {&deleted};
  derived_->OnReplicated(deletes);
  derived_->ForgetKeys([](std::string_view key) { return key == "post_likes:8"; });
  page = derived_->List("post_likes", *prefix, {}, 10);
  ASSERT_TRUE(page);
  EXPECT_TRUE(page->items.empty());
  // The index itself, not only what List shows of it (List leaves out groups that read 0).
  const std::vector<CounterListing> counters = derived_->Counters();
  const auto post_likes = std::find_if(counters.begin(), counters.end(),
                                       [](const auto& c) { return c.name == "post_likes"; });
  ASSERT_NE(post_likes, counters.end());
  EXPECT_EQ(post_likes->groups, 0u);
}

// Two source consumers' messages interleaved in the change stream (the first one replaced
// while its last messages were in flight): each transaction counts once, in one order.
TEST_F(ClusterSharesTest, SourceFencesCountEachTransactionOnceWhateverTheInterleaving) {
  ASSERT_TRUE(derived_->ExecuteAt(kSchema, 1));
  const std::string t100 = Like(1, 2, 1);  // post 1 in partition 0, blog 2 in partition 1
  const std::string t110 = Like(1, 2, 10);
  const std::string t120 = Like(1, 2, 100);
  ApplySource(t100, 2, {5, 100, 1});  // consumer 5
  ApplySource(t110, 3, {5, 110, 1});
  // Consumer 9 took over and starts again from the slot's confirmed position (100).
  ApplySource(t100, 4, {9, 100, 1});  // counted before: skipped
  ApplySource(t110, 5, {9, 110, 1});
  EXPECT_EQ(Value("post_likes:1"), 2);
  EXPECT_EQ(Value("blog_weight:2"), 11);
  // Consumer 5's last message, sent before it knew: refused, consumer 9's counts.
  ApplySource(t120, 6, {5, 120, 1});
  EXPECT_EQ(Value("blog_weight:2"), 11);
  ApplySource(t120, 7, {9, 120, 1});
  EXPECT_EQ(Value("blog_weight:2"), 111);
  EXPECT_EQ(Position(1), 7);
  // The parts of one transaction count each, in order; a part again does not.
  ApplySource(Like(3, 3, 1000), 8, {9, 130, 1});
  ApplySource(Like(3, 2, 1000), 9, {9, 130, 2});
  ApplySource(Like(3, 2, 1000), 10, {9, 130, 2});
  EXPECT_EQ(Value("blog_weight:2"), 1111);
  // A backfill chunk (lsn 0) is checked for its claim only.
  ApplySource(Like(4, 4, 1), 11, {9, 0, 0});
  ApplySource(Like(4, 4, 1), 11, {9, 0, 0});  // read again (a partition gained): done
  ApplySource(Like(4, 4, 1), 12, {5, 0, 0});
  EXPECT_EQ(Value("blog_weight:4"), 1);
  // The segments of one batch share its position: each counts once, read again or not.
  ApplySource(Like(5, 5, 1), 13, {9, 140, 1});
  ApplySource(Like(5, 5, 2), 13, {9, 150, 1});
  ApplySource(Like(5, 5, 1), 13, {9, 140, 1});
  ApplySource(Like(5, 5, 2), 13, {9, 150, 1});
  EXPECT_EQ(Value("blog_weight:5"), 3);
}

// A source's reset in the stream deletes the groups of the due shares only, fenced alike.
TEST_F(ClusterSharesTest, ResetSharesDeleteTheDueSharesGroups) {
  ASSERT_TRUE(derived_->ExecuteAt(kSchema, 1));
  ApplySource("[" + Like(1, 1, 5) + "," + Like(2, 2, 7) + "]", 2, {5, 100, 1});
  const auto partition_of = [](std::string_view key) { return PartitionOf(key); };
  // Partition 1 alone: post 2 and blog 2 go.
  const std::vector<PartitionShare> one = {Shares()[1]};
  derived_->ResetShares("likes", {}, {3, kPendingStart, SourceFence{5, 0, 0}}, one, partition_of);
  EXPECT_EQ(Value("post_likes:1"), 1);
  EXPECT_EQ(Value("blog_weight:1"), 5);
  EXPECT_EQ(Value("post_likes:2"), 0);
  EXPECT_EQ(Value("blog_weight:2"), 0);
  EXPECT_EQ(Position(1), 3);
  // A replaced consumer's reset deletes nothing; one counter's reset deletes its groups.
  derived_->ResetShares("likes", {}, {4, kPendingStart, SourceFence{4, 0, 0}}, Shares(),
                        partition_of);
  EXPECT_EQ(Value("post_likes:1"), 1);
  derived_->ResetShares({}, "post_likes", {5, kPendingStart, SourceFence{5, 0, 0}}, Shares(),
                        partition_of);
  EXPECT_EQ(Value("post_likes:1"), 0);
  EXPECT_EQ(Value("blog_weight:1"), 5);
  // A TRUNCATE at or below a counter's start (a counter backfilling from a later snapshot)
  // leaves its groups, as on a single node; one past its start deletes them.
  ASSERT_TRUE(derived_->ExecuteAt(
      "CREATE COUNTER blog_rows AS SELECT blog_id, count(*) FROM likes GROUP BY blog_id;", 500));
  ApplySource(Like(1, 1, 5), 6, {5, 0, 0});  // a backfill chunk: every counter moves
  EXPECT_EQ(Value("blog_weight:1"), 10);
  EXPECT_EQ(Value("blog_rows:1"), 1);
  derived_->ResetShares("likes", {}, {7, 450, SourceFence{5, 450, 1}}, Shares(), partition_of);
  EXPECT_EQ(Value("blog_weight:1"), 0);
  EXPECT_EQ(Value("blog_rows:1"), 1);
  derived_->ResetShares("likes", {}, {8, 600, SourceFence{5, 600, 1}}, Shares(), partition_of);
  EXPECT_EQ(Value("blog_rows:1"), 0);
}

TEST_F(ClusterSharesTest, ARepairSetsTheDueSharesGroupsOnceAndAMarkerMovesPositionsAlone) {
  ASSERT_TRUE(derived_->ExecuteAt(kSchema, 1));
  Apply("[" + Like(1, 1, 5) + "," + Like(2, 2, 7) + "]", 2, {0, 1});
  const auto partition_of = [](std::string_view key) { return PartitionOf(key); };
  // Checked where it is taken: a group of another counter, a counter that does not exist.
  EXPECT_TRUE(derived_->CheckRepair("post_likes", std::vector<KeyValue>{{"post_likes:2", 3}}));
  EXPECT_FALSE(derived_->CheckRepair("post_likes", std::vector<KeyValue>{{"blog_weight:2", 3}}));
  EXPECT_EQ(derived_->CheckRepair("nope", {}).error().code, ErrorCode::kNotFound);
  // Applied on partition 1's share alone: post 2 set, post 1 (partition 0) left; post 3 new.
  const std::vector<KeyValue> values = {
      {"post_likes:1", 9}, {"post_likes:2", 0}, {"post_likes:3", 4}};
  const std::vector<PartitionShare> one = {Shares()[1]};
  ASSERT_TRUE(
      derived_->RepairShares("post_likes", values, {3, kPendingStart, {}}, one, partition_of));
  EXPECT_EQ(Value("post_likes:1"), 1);
  EXPECT_EQ(Value("post_likes:2"), 0);
  EXPECT_EQ(Value("post_likes:3"), 4);
  EXPECT_EQ(Position(1), 3);
  EXPECT_EQ(Position(0), 2);
  auto listed = derived_->List("post_likes", {}, {}, 10);
  ASSERT_TRUE(listed);
  std::vector<std::string> keys;
  for (const KeyValue& item : listed->items) keys.push_back(item.key);
  std::ranges::sort(keys);
  EXPECT_EQ(keys, (std::vector<std::string>{"post_likes:1", "post_likes:3"}));
  // Read again for both partitions (a partition gained): only partition 0's share is due.
  ASSERT_TRUE(
      derived_->RepairShares("post_likes", values, {3, kPendingStart, {}}, Shares(), partition_of));
  EXPECT_EQ(Value("post_likes:1"), 9);
  EXPECT_EQ(Value("post_likes:3"), 4);
  EXPECT_EQ(Position(0), 3);
  // A counter dropped since: the positions move, nothing else.
  ASSERT_TRUE(
      derived_->RepairShares("gone", values, {4, kPendingStart, {}}, Shares(), partition_of));
  EXPECT_EQ(Position(0), 4);
  // A marker (a verification hold reached) moves every due share's position alone.
  derived_->MarkShares({6, kPendingStart, {}}, Shares(), partition_of);
  EXPECT_EQ(Position(0), 6);
  EXPECT_EQ(Position(1), 6);
  EXPECT_EQ(Value("post_likes:1"), 9);
  EXPECT_EQ(Value("blog_weight:2"), 7);
}

// A follower applies a group of records at once: a group deleted in one batch (it fell to
// 0) and back in a later one must stay listed.
TEST_F(ClusterSharesTest, AGroupDeletedAndBackInOneReplicatedGroupStaysListed) {
  ASSERT_TRUE(derived_->ExecuteAt(kSchema, 1));
  engine::CommitBatch first;
  first.AddPut("post_likes:7", {1, 0});
  const engine::CommitBatch* one[] = {&first};
  engine_->keyspace().ApplyReplicated({0, kSlotCount - 1}, one);
  derived_->OnReplicated(one);
  engine::CommitBatch gone;
  gone.AddDelete("post_likes:7");
  engine::CommitBatch back;
  back.AddPut("post_likes:7", {1, 0});
  const engine::CommitBatch* group[] = {&gone, &back};
  engine_->keyspace().ApplyReplicated({0, kSlotCount - 1}, group);
  derived_->OnReplicated(group);
  auto prefix = derived_->PrefixOf("post_likes", {});
  ASSERT_TRUE(prefix);
  auto page = derived_->List("post_likes", *prefix, {}, 10);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].key, "post_likes:7");
  EXPECT_EQ(page->items[0].value, 1);
}

// A follower may apply groups of a counter before this node runs its CREATE (the owner ran
// it first): the counter, created, lists them.
TEST_F(ClusterSharesTest, ACounterCreatedLateIndexesTheGroupsAFollowerAppliedBefore) {
  ASSERT_TRUE(derived_->ExecuteAt(kSchema, 1));
  engine::CommitBatch batch;
  batch.AddPut("blog_likes:3", {2, 0});
  batch.AddPut("blog_likes:4", {5, 0});
  const engine::CommitBatch* batches[] = {&batch};
  engine_->keyspace().ApplyReplicated({0, kSlotCount - 1}, batches);
  derived_->OnReplicated(batches);  // no such counter here yet: passed by
  ASSERT_TRUE(derived_->ExecuteAt(
      "CREATE COUNTER blog_likes AS SELECT blog_id, count(*) FROM likes GROUP BY blog_id;", 6));
  auto prefix = derived_->PrefixOf("blog_likes", {});
  ASSERT_TRUE(prefix);
  auto page = derived_->List("blog_likes", *prefix, {}, 10);
  ASSERT_TRUE(page) << page.error().message;
  ASSERT_EQ(page->items.size(), 2u);
  EXPECT_EQ(page->items[0].key, "blog_likes:3");
  EXPECT_EQ(page->items[0].value, 2);
  EXPECT_EQ(page->items[1].key, "blog_likes:4");
}

}  // namespace
}  // namespace tally::derived
