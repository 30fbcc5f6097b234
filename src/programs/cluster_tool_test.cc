// `tally cluster`'s reading of INFO cluster: the nodes and partitions it lists, when every
// partition has a live owner, when the shares are even (draining nodes owning none and not
// counted), and a tallyd that is no cluster node. (The commands against a real cluster:
// tests/e2e/test_cluster.py, MembershipTest.)
#include "programs/cluster_tool.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::programs {
namespace {

constexpr std::string_view kInfo =
    "# Cluster\r\ncluster_enabled:1\r\ntally_cluster_name:tally\r\ntally_node_id:aa\r\n"
    "tally_node_name:n1\r\ntally_nats_connected:1\r\ntally_nats_url:nats://127.0.0.1:4222\r\n"
    "tally_nats_reconnects:0\r\ntally_partitions:3\r\ntally_partitions_owned:2\r\n"
    "tally_draining:0\r\n"
    "node0:id=aa,name=n1,address=127.0.0.1:7001,live=1,self=1,owned=2,draining=0\r\n"
    "node1:id=bb,name=n2,address=127.0.0.1:7002,live=1,self=0,owned=1,draining=0\r\n"
    "node2:id=cc,name=n3,address=127.0.0.1:7003,live=0,self=0,owned=0,draining=0\r\n"
    "partition0:slots=0-5460,role=owned,owner=n1,owner_address=127.0.0.1:7001,term=1,"
    "applied=9,owner_seq=9,lag=0,owner_silent_ms=0\r\n"
    "partition1:slots=5461-10922,role=following,owner=n2,owner_address=127.0.0.1:7002,term=2,"
    "applied=5,owner_seq=8,lag=3,owner_silent_ms=40\r\n"
    "partition2:slots=10923-16383,role=owned,owner=n1,owner_address=127.0.0.1:7001,term=3,"
    "applied=1,owner_seq=1,lag=0,owner_silent_ms=0\r\n";

std::string Replace(std::string text, std::string_view from, std::string_view to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

TEST(ClusterToolTest, ReadsNodesAndPartitions) {
  auto view = ParseClusterInfo(kInfo);
  ASSERT_TRUE(view.has_value()) << view.error().message;
  EXPECT_EQ(view->self_name, "n1");
  EXPECT_FALSE(view->draining);
  ASSERT_EQ(view->nodes.size(), 3u);
  EXPECT_EQ(view->nodes[1].name, "n2");
  EXPECT_EQ(view->nodes[1].address, "127.0.0.1:7002");
  EXPECT_TRUE(view->nodes[1].live);
  EXPECT_FALSE(view->nodes[1].self);
  EXPECT_EQ(view->nodes[1].owned, 1);
  EXPECT_FALSE(view->nodes[2].live);
  ASSERT_EQ(view->partitions.size(), 3u);
  EXPECT_EQ(view->partitions[1].slots, "5461-10922");
  EXPECT_EQ(view->partitions[1].role, "following");
  EXPECT_EQ(view->partitions[1].owner, "n2");
  EXPECT_EQ(view->partitions[1].lag, 3);
  EXPECT_EQ(view->Shares(), "n1 2, n2 1");
}

TEST(ClusterToolTest, BalancedCountsOnlyTheNodesThatTakePartitions) {
  auto view = ParseClusterInfo(kInfo);
  ASSERT_TRUE(view.has_value());
  EXPECT_TRUE(view->AllOwned());
  EXPECT_TRUE(view->Balanced());  // 2 and 1 of 3 over two live nodes

  // n2 drains while it still owns a partition: not balanced; once n1 owns all three, it is.
  std::string draining = Replace(std::string(kInfo), "owned=1,draining=0", "owned=1,draining=1");
  view = ParseClusterInfo(draining);
  ASSERT_TRUE(view.has_value());
  EXPECT_FALSE(view->Balanced());
  EXPECT_EQ(view->Shares(), "n1 2, n2 1 (draining)");
  draining = Replace(draining, "owned=1,draining=1", "owned=0,draining=1");
  draining = Replace(draining, "owner=n2,owner_address=127.0.0.1:7002",
                     "owner=n1,owner_address=127.0.0.1:7001");
  draining = Replace(draining, "self=1,owned=2", "self=1,owned=3");
  view = ParseClusterInfo(draining);
  ASSERT_TRUE(view.has_value());
  EXPECT_TRUE(view->Balanced());
}

TEST(ClusterToolTest, APartitionOfAGoneNodeIsNotOwned) {
  const std::string gone = Replace(std::string(kInfo), "owner=n2,owner_address=127.0.0.1:7002",
                                   "owner=n3,owner_address=127.0.0.1:7003");
  auto view = ParseClusterInfo(gone);
  ASSERT_TRUE(view.has_value());
  EXPECT_FALSE(view->AllOwned());
  EXPECT_FALSE(view->Balanced());
}

TEST(ClusterToolTest, ASingleNodeIsRefused) {
  auto view = ParseClusterInfo("# Cluster\r\ncluster_enabled:0\r\n");
  ASSERT_FALSE(view.has_value());
  EXPECT_NE(view.error().message.find("no cluster node"), std::string::npos);
}

}  // namespace
}  // namespace tally::programs
