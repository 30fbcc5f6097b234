// Placement: which live node should take a partition that needs an owner. Pure functions of
// what every node sees alike (the live members and how many partitions each owns), so that
// nodes agree without talking: the node ranked first claims at once, the others wait a step
// per rank before trying (in case the first is gone too). Safety never depends on this — two
// nodes claiming at once are told apart by the stream (the claim of one is refused) — it only
// keeps them from racing and keeps the partitions spread evenly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tally::cluster {

// A live node as placement sees it.
struct PlacementMember {
  std::string node_id;
  uint32_t owned = 0;  // partitions it owns now
};

// The order in which the `members` should try to claim each of `partitions` (ascending
// partition numbers that need an owner), as indexes into `members`: result[i] is the order
// for partitions[i]. Partitions are handed out one after the other, each to the member that
// owns the fewest so far (counting what this plan gave it), ties broken by a hash of the
// node id and the partition (rendezvous hashing: the same node for the same partition,
// whatever the order of `members`), then by node id. So a cold cluster of N nodes and P
// partitions ends with P/N each (±1), and a dead node's partitions spread over the rest.
// Empty inner vectors when `members` is empty.
std::vector<std::vector<size_t>> ClaimOrders(std::span<const uint32_t> partitions,
                                             std::span<const PlacementMember> members);

// The rendezvous weight of `node_id` for `partition` (64-bit, well mixed).
uint64_t RendezvousWeight(const std::string& node_id, uint32_t partition);

}  // namespace tally::cluster
