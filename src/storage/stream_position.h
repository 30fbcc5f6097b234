// StreamPosition: where a cluster node stands in one partition's stream (issue 13). The
// follower advances it (cluster/follower.h) and the cluster store saves it with each
// checkpoint (storage/cluster_tables.h), so it lives below both.
#pragma once

#include <cstdint>

namespace tally::storage {

// Every record up to `seq` is applied, and {term, writer} is the ownership in force there
// (cluster::OwnershipFilter). {} = the stream's start.
struct StreamPosition {
  uint64_t seq = 0;
  uint64_t term = 0;
  uint64_t writer = 0;

  bool operator==(const StreamPosition&) const = default;
};

}  // namespace tally::storage
