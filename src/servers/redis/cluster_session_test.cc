// A cluster node's Redis session without sockets or NATS: the routes and topology are set by
// the test (as the coordinator would), and each request is checked for where it goes —
// served here, MOVED, TRYAGAIN, CLUSTERDOWN, CROSSSLOT — and for what the CLUSTER commands,
// INFO, DBSIZE and FLUSHALL say and do.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/routing.h"
#include "core/slot.h"
#include "engine/derived/derived_keyspace.h"
#include "engine/derived/derived_test_util.h"
#include "servers/redis/session.h"
#include "servers/redis/worker_shard.h"

namespace tally::redis {
namespace {

using Request = std::vector<std::string_view>;

constexpr uint32_t kPartitions = 4;
constexpr int64_t kNowMs = 1'700'000'000'000;
const std::string kSelf = std::string(40, 'a');
const std::string kOther = std::string(40, 'b');

// A key named `stem`<n> whose slot lies in `partition`.
std::string KeyIn(uint32_t partition, std::string_view stem = "k") {
  for (int i = 0;; ++i) {
    std::string key = fmt::format("{}{}", stem, i);
    if (SlotPartition(KeySlot(key), kPartitions) == partition) return key;
  }
}

class ClusterSessionTest : public derived::DerivedStoreTest {
 protected:
  ClusterSessionTest()
      : DerivedStoreTest("tally_cluster_session_test_", kNowMs, derived::DerivedOptions{}),
        routing_(kPartitions) {}

  void SetUp() override {
    DerivedStoreTest::SetUp();
    // Partitions 0 and 1 are this node's, 2 is the other node's, 3 changes hands.
    SetPartition(0, cluster::Route::kServe, "owned", kSelf, "127.0.0.1:7001");
    SetPartition(1, cluster::Route::kServe, "owned", kSelf, "127.0.0.1:7001");
    SetPartition(2, cluster::Route::kMoved, "following", kOther, "127.0.0.1:7002");
    SetPartition(3, cluster::Route::kTryAgain, "following", kOther, "127.0.0.1:7002");
    servers::Services services(*engine_);
    services.derived = derived_.get();
    services.cluster = &routing_;
    core_ = std::make_unique<ServerCore>(std::move(services), ServerOptions{});
    shard_ = std::make_unique<WorkerShard>(&engine_->keyspace());
    core_->AddWorkerStats(&shard_->stats());
    session_ = std::make_unique<Session>(
        *core_, *shard_, core_->clients().Add("127.0.0.1:50000", "127.0.0.1:7001", -1, kNowMs));
  }
  void TearDown() override {
    session_.reset();
    shard_.reset();
    core_.reset();
    DerivedStoreTest::TearDown();
  }

  // Sets one partition's route and its place in the topology; a partition served here is
  // served for an hour unless `serve_until` says otherwise.
  void SetPartition(uint32_t p, cluster::Route route, std::string role, std::string owner,
                    std::string address,
                    std::chrono::steady_clock::time_point serve_until =
                        std::chrono::steady_clock::now() + std::chrono::hours(1)) {
    routing_.SetRoute(p, route, serve_until);
    topology_.self_id = kSelf;
    topology_.partition_count = kPartitions;
    topology_.partitions.resize(kPartitions);
    cluster::TopologyPartition& partition = topology_.partitions[p];
    partition.slots = PartitionSlots(p, kPartitions);
    partition.role = std::move(role);
    partition.route = route;
    partition.owner_id = std::move(owner);
    partition.owner_name = partition.owner_id == kSelf ? "one" : "two";
    partition.owner_address = std::move(address);
    topology_.nodes = {{kSelf, "one", "127.0.0.1:7001", "127.0.0.1:7101", true, true, {0, 1}},
                       {kOther, "two", "127.0.0.1:7002", "127.0.0.1:7102", false, true, {2, 3}}};
    routing_.SetTopology(std::make_shared<cluster::Topology>(topology_));
  }

  std::string Call(const Request& request) {
    session_->Execute(request);
    shard_->FoldIncrements();
    std::string replies;
    replies.swap(session_->output());
    return replies;
  }

  cluster::Routing routing_;
  cluster::Topology topology_;
  std::unique_ptr<ServerCore> core_;
  std::unique_ptr<WorkerShard> shard_;
  std::unique_ptr<Session> session_;
};

TEST_F(ClusterSessionTest, KeysAreServedWhereOwnedAndMovedElsewhere) {
  const std::string mine = KeyIn(0);
  const std::string theirs = KeyIn(2);
  EXPECT_EQ(Call({"INCRBY", mine, "5"}), ":5\r\n");
  EXPECT_EQ(Call({"GET", mine}), "$1\r\n5\r\n");
  EXPECT_EQ(Call({"INCR", theirs}), fmt::format("-MOVED {} 127.0.0.1:7002\r\n", KeySlot(theirs)));
  EXPECT_EQ(Call({"GET", theirs}), fmt::format("-MOVED {} 127.0.0.1:7002\r\n", KeySlot(theirs)));
  EXPECT_EQ(Call({"GET", KeyIn(3)}).substr(0, 10), "-TRYAGAIN ");
  // Nothing of the refused writes reached the keyspace.
  EXPECT_EQ(engine_->keyspace().size(), 1u);
}

TEST_F(ClusterSessionTest, AWriteToAPartitionWithoutQuorumIsRefusedAndReadsGoOn) {
  const std::string key = KeyIn(1);
  ASSERT_EQ(Call({"SET", key, "7"}), "+OK\r\n");
  SetPartition(1, cluster::Route::kServeReads, "owned", kSelf, "127.0.0.1:7001");
  EXPECT_EQ(Call({"INCR", key}).substr(0, 13), "-CLUSTERDOWN ");
  EXPECT_EQ(Call({"GET", key}), "$1\r\n7\r\n");
  SetPartition(1, cluster::Route::kDown, "following", "", "");
  EXPECT_EQ(Call({"GET", key}), "-CLUSTERDOWN Hash slot not served\r\n");
}

TEST_F(ClusterSessionTest, NothingIsServedPastTheReadLeaseButReadOnlyReads) {
  const std::string key = KeyIn(1);
  ASSERT_EQ(Call({"SET", key, "7"}), "+OK\r\n");
  // Owned here, but its stream has not confirmed that lately: another node may own it.
  for (const cluster::Route route : {cluster::Route::kServe, cluster::Route::kServeReads}) {
    SetPartition(1, route, "owned", kSelf, "127.0.0.1:7001", std::chrono::steady_clock::now());
    EXPECT_EQ(routing_.route(1), cluster::Route::kUnconfirmed);
    const std::string refused = fmt::format(
        "-CLUSTERDOWN The stream of slot {} has not confirmed this node's ownership lately: "
        "another node may own it now, so nothing is read or written here\r\n",
        KeySlot(key));
    EXPECT_EQ(Call({"GET", key}), refused);
    EXPECT_EQ(Call({"INCR", key}), refused);
    EXPECT_EQ(Call({"READONLY"}), "+OK\r\n");
    EXPECT_EQ(Call({"GET", key}), "$1\r\n7\r\n");
    EXPECT_EQ(Call({"INCR", key}), refused);
    EXPECT_EQ(Call({"READWRITE"}), "+OK\r\n");
  }
  // Confirmed again (a record of its became durable): served.
  SetPartition(1, cluster::Route::kServe, "owned", kSelf, "127.0.0.1:7001");
  EXPECT_EQ(Call({"INCR", key}), ":8\r\n");
}

TEST_F(ClusterSessionTest, KeysOfDifferentSlotsAreRefusedEvenWhenOwnedHere) {
  const std::string a = KeyIn(0, "a");
  const std::string b = KeyIn(0, "b");
  ASSERT_NE(KeySlot(a), KeySlot(b));
  EXPECT_EQ(Call({"MGET", a, b}), "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
  const std::string likes = fmt::format("{{{}}}:likes", a);
  const std::string posts = fmt::format("{{{}}}:posts", a);
  EXPECT_EQ(Call({"MSET", likes, "1", posts, "2"}), "+OK\r\n");
  EXPECT_EQ(Call({"MGET", likes, posts}), "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
}

TEST_F(ClusterSessionTest, ATransactionStaysInOneSlot) {
  const std::string tag = KeyIn(0, "t");
  const std::string first = fmt::format("{{{}}}:x", tag);
  const std::string second = fmt::format("{{{}}}:y", tag);
  const std::string elsewhere = KeyIn(1);
  EXPECT_EQ(Call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(Call({"INCR", first}), "+QUEUED\r\n");
  EXPECT_EQ(Call({"INCRBY", second, "2"}), "+QUEUED\r\n");
  EXPECT_EQ(Call({"EXEC"}), "*2\r\n:1\r\n:2\r\n");

  EXPECT_EQ(Call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(Call({"INCR", first}), "+QUEUED\r\n");
  EXPECT_EQ(Call({"INCR", elsewhere}),
            "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
  EXPECT_EQ(Call({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.\r\n");
  EXPECT_EQ(Call({"GET", first}), "$1\r\n1\r\n");

  // The slot changed hands between MULTI and EXEC: nothing runs.
  EXPECT_EQ(Call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(Call({"INCR", first}), "+QUEUED\r\n");
  SetPartition(0, cluster::Route::kMoved, "following", kOther, "127.0.0.1:7002");
  EXPECT_EQ(Call({"EXEC"}), fmt::format("-MOVED {} 127.0.0.1:7002\r\n", KeySlot(first)));
  SetPartition(0, cluster::Route::kServe, "owned", kSelf, "127.0.0.1:7001");
  EXPECT_EQ(Call({"GET", first}), "$1\r\n1\r\n");
}

TEST_F(ClusterSessionTest, AReadOnlyConnectionReadsWhatThisNodeFollows) {
  const std::string theirs = KeyIn(2);
  engine::CommitBatch replicated;
  replicated.AddPut(theirs, {41, 0});
  const engine::CommitBatch* batches[] = {&replicated};
  engine_->keyspace().ApplyReplicated(PartitionSlots(2, kPartitions), batches);
  EXPECT_EQ(Call({"READONLY"}), "+OK\r\n");
  EXPECT_EQ(Call({"GET", theirs}), "$2\r\n41\r\n");
  EXPECT_EQ(Call({"INCR", theirs}), fmt::format("-MOVED {} 127.0.0.1:7002\r\n", KeySlot(theirs)));
  EXPECT_EQ(Call({"READWRITE"}), "+OK\r\n");
  EXPECT_EQ(Call({"GET", theirs}), fmt::format("-MOVED {} 127.0.0.1:7002\r\n", KeySlot(theirs)));
}

TEST_F(ClusterSessionTest, AReadOnlyReadOfAPartitionBeingRestoredGoesToItsOwner) {
  const std::string theirs = KeyIn(2);
  topology_.partitions[2].restoring = true;
  routing_.SetTopology(std::make_shared<cluster::Topology>(topology_));
  EXPECT_EQ(Call({"READONLY"}), "+OK\r\n");
  EXPECT_EQ(Call({"GET", theirs}), fmt::format("-MOVED {} 127.0.0.1:7002\r\n", KeySlot(theirs)));
  topology_.partitions[2].restoring = false;
  routing_.SetTopology(std::make_shared<cluster::Topology>(topology_));
  EXPECT_EQ(Call({"GET", theirs}), "$-1\r\n");
}

TEST_F(ClusterSessionTest, TheClusterCommandsDescribeTheTopology) {
  EXPECT_EQ(Call({"CLUSTER", "KEYSLOT", "{user1000}.following"}), ":3443\r\n");
  EXPECT_EQ(Call({"CLUSTER", "MYID"}), fmt::format("${}\r\n{}\r\n", kSelf.size(), kSelf));
  const std::string slots = Call({"CLUSTER", "SLOTS"});
  EXPECT_EQ(slots.substr(0, 4), "*4\r\n");
  EXPECT_NE(slots.find(":0\r\n:4095\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n"), std::string::npos)
      << slots;
  // Partition 0's standby: the other live node.
  EXPECT_NE(slots.find(fmt::format("$40\r\n{}\r\n*3\r\n$9\r\n127.0.0.1\r\n:7002\r\n", kSelf)),
            std::string::npos)
      << slots;
  const std::string info = Call({"CLUSTER", "INFO"});
  EXPECT_NE(info.find("cluster_state:ok\r\n"), std::string::npos) << info;
  EXPECT_NE(info.find("cluster_slots_pfail:4096\r\n"), std::string::npos) << info;
  const std::string nodes = Call({"CLUSTER", "NODES"});
  EXPECT_NE(nodes.find(fmt::format("{} 127.0.0.1:7001@17001 myself,master - 0 0 0 connected "
                                   "0-4095 4096-8191\n",
                                   kSelf)),
            std::string::npos)
      << nodes;
  EXPECT_NE(Call({"INFO"}).find("cluster_enabled:1\r\n"), std::string::npos);
  EXPECT_NE(Call({"INFO", "server"}).find("redis_mode:cluster\r\n"), std::string::npos);
  EXPECT_EQ(Call({"CLUSTER", "RESET"}).substr(0, 24), "-ERR unknown subcommand ");
}

TEST_F(ClusterSessionTest, WhatANodeDoesNotOfferInAClusterIsRefused) {
  EXPECT_EQ(Call({"SELECT", "1"}), "-ERR SELECT is not allowed in cluster mode\r\n");
  EXPECT_EQ(Call({"SELECT", "0"}), "+OK\r\n");
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "c", "k", "1", "0"}).substr(0, 41),
            "-ERR counter.repairstate is not offered i");
  const std::string huge(64 * 1024 + 1, 'k');
  EXPECT_EQ(Call({"SET", huge, "1"}).substr(0, 25), "-ERR key too long for a c");
}

TEST_F(ClusterSessionTest, DbsizeScanAndFlushallKeepToTheOwnedSlots) {
  const std::string mine = KeyIn(1);
  const std::string theirs = KeyIn(2);
  ASSERT_EQ(Call({"SET", mine, "1"}), "+OK\r\n");
  engine::CommitBatch replicated;
  replicated.AddPut(theirs, {2, 0});
  const engine::CommitBatch* batches[] = {&replicated};
  engine_->keyspace().ApplyReplicated(PartitionSlots(2, kPartitions), batches);
  EXPECT_EQ(Call({"DBSIZE"}), ":1\r\n");
  EXPECT_EQ(Call({"KEYS", "*"}), fmt::format("*1\r\n${}\r\n{}\r\n", mine.size(), mine));
  EXPECT_EQ(Call({"FLUSHALL"}), "+OK\r\n");
  EXPECT_EQ(Call({"DBSIZE"}), ":0\r\n");
  // The other node's partition, held here as its standby, is left as it was.
  EXPECT_EQ(engine_->keyspace().size(), 1u);
}

TEST_F(ClusterSessionTest, FlushallKeepsTheChangeFeedsPositionAndForgetsTheFlushedGroups) {
  ASSERT_TRUE(
      derived_->Execute("CREATE SOURCE stars (repo bigint); CREATE COUNTER repo_stars "
                        "AS SELECT repo, count(*) FROM stars GROUP BY repo;"));
  // A group on an owned partition (1) and one on the other node's (2).
  const auto group_in = [&](uint32_t partition) {
    for (int repo = 0;; ++repo) {
      const std::string part = std::to_string(repo);
      const std::string_view parts[] = {part};
      std::string key = derived_->KeyOf("repo_stars", parts).value();
      if (SlotPartition(KeySlot(key), kPartitions) == partition) return std::pair{repo, key};
    }
  };
  const auto [mine_repo, mine] = group_in(1);
  const auto [theirs_repo, theirs] = group_in(2);
  derived::ChangeDecoder decoder;
  ASSERT_TRUE(derived_->Push(fmt::format(R"([{{"source":"stars","new":{{"repo":{}}}}},)"
                                         R"({{"source":"stars","new":{{"repo":{}}}}}])",
                                         mine_repo, theirs_repo),
                             "", decoder));
  // The change feed's position of partition 1: how far its owner applied the change stream.
  const std::string position = derived::PositionKey(cluster::ChangePositionName(1, kPartitions));
  const engine::HashedKey position_key(position);
  engine_->keyspace().Lock(position_key).Set(position_key, 42, engine::SetOptions{});

  // The family's index of groups (what COUNTER.LIST and the retention sweep walk), not its
  // values: a read of a flushed group gives 0 whether or not the index still names it.
  const auto indexed_groups = [&]() -> std::optional<size_t> {
    for (const derived::CounterListing& counter : derived_->Counters()) {
      if (counter.name == "repo_stars") return counter.groups;
    }
    return std::nullopt;
  };
  ASSERT_EQ(indexed_groups(), size_t{2});

  EXPECT_EQ(Call({"FLUSHALL"}), "+OK\r\n");
  uint64_t epoch = 0;
  EXPECT_EQ(derived_->Get(std::vector<std::string>{mine, theirs}, &epoch),
            (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(indexed_groups(), size_t{1});  // the flushed group is forgotten, the other node's stays
  const auto listed = derived_->List("repo_stars", "", "", 10);
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_EQ(listed->items[0].key, theirs);
  // Flushed, the pushes applied stay applied: not read again from the change stream.
  EXPECT_EQ(engine_->keyspace().Lock(position_key).Get(position_key), 42);
}

}  // namespace
}  // namespace tally::redis
