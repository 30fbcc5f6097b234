#include "cluster/routing.h"

#include <fmt/format.h>

namespace tally::cluster {

std::string ChangePositionName(uint32_t partition, uint32_t partition_count) {
  return fmt::format("{{{}}}changes", PartitionTag(partition, partition_count));
}

std::string SourceFenceName(uint32_t partition, uint32_t partition_count) {
  return fmt::format("{{{}}}source", PartitionTag(partition, partition_count));
}

const TopologyNode* Topology::Node(std::string_view node_id) const {
  for (const TopologyNode& node : nodes) {
    if (node.node_id == node_id) return &node;
  }
  return nullptr;
}

std::vector<const TopologyNode*> Topology::Standbys(uint32_t partition) const {
  std::vector<const TopologyNode*> standbys;
  const std::string& owner = partitions[partition].owner_id;
  for (const TopologyNode& node : nodes) {
    if (node.live && node.node_id != owner && !node.redis_address.empty()) {
      standbys.push_back(&node);
    }
  }
  return standbys;
}

Routing::Routing(uint32_t partition_count)
    : partition_count_(partition_count),
      routes_(new std::atomic<Route>[partition_count]),
      serve_until_(new std::atomic<int64_t>[partition_count]),
      topology_(std::make_shared<Topology>()) {
  for (uint32_t p = 0; p < partition_count; ++p) {
    routes_[p].store(Route::kDown);
    serve_until_[p].store(0);
  }
}

std::shared_ptr<const Topology> Routing::topology() const {
  std::lock_guard lock(mutex_);
  return topology_;
}

void Routing::SetTopology(std::shared_ptr<const Topology> topology) {
  std::lock_guard lock(mutex_);
  topology_ = std::move(topology);
}

}  // namespace tally::cluster
