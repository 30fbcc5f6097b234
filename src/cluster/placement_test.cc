// Placement: a cold cluster's partitions spread evenly, the same whatever order the members
// are listed in; a dead node's partitions spread over the live ones, fewest-owned first.
#include "cluster/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace tally::cluster {
namespace {

// How many of `partitions` each member is asked to claim first.
std::map<std::string, int> FirstChoices(const std::vector<uint32_t>& partitions,
                                        const std::vector<PlacementMember>& members) {
  std::map<std::string, int> counts;
  for (const auto& order : ClaimOrders(partitions, members)) {
    ++counts[members[order.front()].node_id];
  }
  return counts;
}

std::vector<uint32_t> Range(uint32_t count) {
  std::vector<uint32_t> partitions(count);
  std::iota(partitions.begin(), partitions.end(), 0u);
  return partitions;
}

TEST(PlacementTest, AColdClusterSpreadsEvenly) {
  const std::vector<PlacementMember> members = {{"a", 0}, {"b", 0}, {"c", 0}};
  const auto counts = FirstChoices(Range(16), members);
  ASSERT_EQ(counts.size(), 3u);
  for (const auto& [id, count] : counts) {
    EXPECT_GE(count, 5) << id;
    EXPECT_LE(count, 6) << id;
  }
}

TEST(PlacementTest, EveryNodeComputesTheSameOrderWhateverItsListOrder) {
  std::vector<PlacementMember> members = {{"n1", 2}, {"n2", 0}, {"n3", 1}, {"n4", 0}};
  const std::vector<uint32_t> needy = {3, 5, 8, 13};
  const auto first = ClaimOrders(needy, members);
  std::vector<std::vector<std::string>> named;
  for (const auto& order : first) {
    named.emplace_back();
    for (size_t i : order) named.back().push_back(members[i].node_id);
  }
  std::reverse(members.begin(), members.end());
  const auto second = ClaimOrders(needy, members);
  for (size_t p = 0; p < needy.size(); ++p) {
    std::vector<std::string> names;
    for (size_t i : second[p]) names.push_back(members[i].node_id);
    EXPECT_EQ(names, named[p]);
    EXPECT_EQ(names.size(), 4u);  // every member is ranked
  }
}

TEST(PlacementTest, ADeadNodesPartitionsGoToTheLeastLoadedFirst) {
  // Six partitions of a dead node; the live ones own 5 and 3.
  const std::vector<PlacementMember> members = {{"busy", 5}, {"idle", 3}};
  const auto counts = FirstChoices({1, 4, 6, 9, 11, 14}, members);
  EXPECT_EQ(counts.at("idle"), 4);  // 3 + 4 = 7 against 5 + 2 = 7
  EXPECT_EQ(counts.at("busy"), 2);
}

TEST(PlacementTest, NoMembersNoOrder) {
  const auto orders = ClaimOrders(Range(3), {});
  ASSERT_EQ(orders.size(), 3u);
  for (const auto& order : orders) EXPECT_TRUE(order.empty());
}

}  // namespace
}  // namespace tally::cluster
