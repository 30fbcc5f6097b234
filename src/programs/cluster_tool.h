// `tally cluster`: an operator's view of a running cluster and the moves of its nodes, over
// the Redis protocol of one node (docs/cluster.md, "Adding and removing nodes"):
//
//   status       the nodes (live, draining, partitions owned) and the partitions (slots,
//                owner, this node's role and lag), from the node's INFO cluster;
//   remove-node  CLUSTER.DRAIN to the node, then its partitions' hand-overs as they happen,
//                until it owns none and every partition has a live owner elsewhere: then it
//                may be stopped without a failover;
//   rebalance    the hand-overs as they happen until the partitions are spread evenly over
//                the live nodes that are not draining, optionally once there are --nodes of
//                them (a node just added gets its share: balance is the nodes' own, this only
//                waits and shows it).
//
// Errors are values: a node that cannot be reached or answers an error ends the command with
// that message. Each command's result is an exit status (kExit*).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "programs/verify/resp_client.h"

namespace tally::programs {

inline constexpr int kExitDone = 0;
inline constexpr int kExitTimedOut = 1;  // the state waited for was not reached in time
inline constexpr int kExitError = 2;

// A node as one node's INFO cluster lists it.
struct ClusterToolNode {
  std::string name;
  std::string address;  // host:port of its Redis port
  bool live = false;
  bool self = false;
  bool draining = false;
  int64_t owned = 0;
};

// A partition as one node's INFO cluster lists it.
struct ClusterToolPartition {
  std::string slots;          // "first-last"
  std::string role;           // the asked node's role for it (owned, following, ...)
  std::string owner;          // the owner's name; empty: none known
  std::string owner_address;  // empty: none known
  int64_t lag = 0;            // records the asked node has still to apply
};

// What one node's INFO cluster says.
struct ClusterView {
  std::string self_name;
  bool draining = false;
  std::vector<ClusterToolNode> nodes;
  std::vector<ClusterToolPartition> partitions;

  // Whether every partition has an owner among the live nodes.
  bool AllOwned() const;
  // Whether every partition has a live owner and the live nodes that are not draining each
  // own between floor and ceil of partitions / their number (draining ones own nothing).
  bool Balanced() const;
  // The live nodes that are not draining: those that take partitions.
  int64_t Members() const;
  // "node1 5, node2 6 (draining), node3 5": each node's partitions owned.
  std::string Shares() const;
};

// Reads INFO cluster's text. kInvalidArgument when it is no cluster node's ("cluster_enabled:0").
Result<ClusterView> ParseClusterInfo(std::string_view info);

struct ClusterToolOptions {
  std::string server = "127.0.0.1:6380";  // the node asked (remove-node: the node removed)
  verify::Credentials tallyd;
  std::chrono::seconds timeout{600};  // remove-node, rebalance: how long to wait at most
  std::chrono::milliseconds poll{250};
  // rebalance: how many live nodes that are not draining to wait for (0: those seen); a node
  // just started is seen once its first heartbeats arrive.
  int64_t nodes = 0;
};

// The commands. They print to `out`; remove-node and rebalance a line each time the shares
// change, with the seconds since they began.
int ClusterStatus(const ClusterToolOptions& options, std::FILE* out);
int ClusterRemoveNode(const ClusterToolOptions& options, std::FILE* out);
int ClusterRebalance(const ClusterToolOptions& options, std::FILE* out);

}  // namespace tally::programs
