// ClusterOptions: what tallyd is told about the cluster it joins (the --cluster-* options).
// Plain data, no dependencies: the option parser and its fuzzer include it alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tally::cluster {

struct ClusterOptions {
  // --cluster-nats: the NATS servers (nats://host:port); empty = a single node on its
  // embedded store (the default).
  std::vector<std::string> nats_servers;
  // --cluster-partitions: how many partitions the hash slots are split into; fixed when the
  // cluster is created (every node must say the same). Default 16.
  uint32_t partitions = 16;
  // --cluster-replicas: the replicas of each partition's stream (3: one nats-server may be
  // lost; 1 for a single nats-server, for trying out). Default 3.
  int replicas = 3;
  // --cluster-name: names the streams (<NAME>_P<p>, <NAME>_META) and subjects (<name>.p.<p>,
  // <name>.members), so that clusters may share NATS servers. [a-z0-9_-]{1,32}. Default tally.
  std::string name = "tally";
  // --cluster-node-name: this node's name in CLUSTER NODES and logs; empty: its Redis
  // address (<announce host>:<port>).
  std::string node_name;
  // --cluster-announce-host: the address other nodes and clients reach this node at (what
  // MOVED and CLUSTER SLOTS name); default the --bind address, or 127.0.0.1 when that is a
  // wildcard.
  std::string announce_host;
  // --cluster-lease-ms: an owner whose stream is silent this long is replaced by a standby.
  // Owners write a renewal every quarter of it when idle. Default 2000.
  int64_t lease_ms = 2000;
  // How long the change stream remembers a push's id (its de-duplication window): tallyd's
  // --idempotency-window, set by the node.
  int64_t idempotency_window_ms = 24LL * 3600 * 1000;

  bool enabled() const { return !nats_servers.empty(); }
};

}  // namespace tally::cluster
