// ClusterOptions: what tallyd is told about the cluster it joins (the --cluster-* options).
// Plain data, no dependencies: the option parser and its fuzzer include it alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tally::cluster {

// TLS to the NATS servers (the --cluster-nats-tls-* options; docs/cluster.md, "TLS to NATS").
// Used when any of them is given or a --cluster-nats URL starts with tls://; always TLS 1.2
// or later, and every server's certificate is checked.
struct NatsTlsOptions {
  std::string ca_cert_file;  // CAs that sign the servers' certificates; empty: the system's
  std::string cert_file;     // this node's certificate and key, for servers that verify
  std::string key_file;      //   their clients (verify: true); both or neither
  std::string server_name;   // the name every server's certificate must carry; empty: the
                             //   host the URLs name (one for all: nats.c checks one name)

  bool any() const {
    return !ca_cert_file.empty() || !cert_file.empty() || !key_file.empty() || !server_name.empty();
  }
};

// The cluster a node joins. Used by ClusterNode::Open.
struct ClusterOptions {
  // --cluster-nats: the NATS servers (nats://host:port); empty = a single node on its
  // embedded store (the default).
  std::vector<std::string> nats_servers;
  NatsTlsOptions nats_tls;
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
  // --cluster-snapshot-records: after a checkpoint, a partition's owner writes a snapshot
  // of it to the snapshot stream (<NAME>_SNAPSHOTS) once its stream has this many records
  // past the previous snapshot, and trims the stream below what every live node saved and
  // the snapshot (docs/cluster.md, "Snapshots and trimming"). 0: no snapshots, streams keep
  // every record. Default 10000.
  uint64_t snapshot_every_records = 10000;
  // How long the change stream remembers a push's id (its de-duplication window): tallyd's
  // --idempotency-window, set by the node.
  int64_t idempotency_window_ms = 24LL * 3600 * 1000;

  bool enabled() const { return !nats_servers.empty(); }
};

}  // namespace tally::cluster
