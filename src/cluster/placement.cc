#include "cluster/placement.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <numeric>

namespace tally::cluster {

uint64_t RendezvousWeight(const std::string& node_id, uint32_t partition) {
  return XXH3_64bits_withSeed(node_id.data(), node_id.size(), partition);
}

std::vector<std::vector<size_t>> ClaimOrders(std::span<const uint32_t> partitions,
                                             std::span<const PlacementMember> members) {
  std::vector<uint32_t> owned(members.size());
  for (size_t i = 0; i < members.size(); ++i) owned[i] = members[i].owned;
  std::vector<std::vector<size_t>> orders;
  orders.reserve(partitions.size());
  for (const uint32_t partition : partitions) {
    std::vector<size_t> order(members.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<uint64_t> weight(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      weight[i] = RendezvousWeight(members[i].node_id, partition);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (owned[a] != owned[b]) return owned[a] < owned[b];
      if (weight[a] != weight[b]) return weight[a] > weight[b];
      return members[a].node_id < members[b].node_id;
    });
    if (!order.empty()) ++owned[order.front()];
    orders.push_back(std::move(order));
  }
  return orders;
}

}  // namespace tally::cluster
