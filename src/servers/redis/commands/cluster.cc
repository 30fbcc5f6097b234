// The cluster commands: CLUSTER SLOTS, SHARDS, NODES, INFO, KEYSLOT, MYID, READONLY,
// READWRITE, ASKING, and INFO's "# Cluster" section. Their answers come from the topology
// the coordinator keeps (cluster/routing.h); each partition is a contiguous slot range with
// one owner (a master, in Redis's words) and the other live nodes as its standbys (replicas).
// Without a cluster they answer as a Redis server with cluster support disabled.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/slot.h"
#include "servers/redis/command_args.h"
#include "servers/redis/command_table.h"
#include "servers/redis/server_core.h"
#include "servers/redis/session.h"

namespace tally::redis::commands {
namespace {

constexpr std::string_view kDisabled = "ERR This instance has cluster support disabled";

// "host:port" split at its last colon; port 0 when it has none.
struct Address {
  std::string host;
  int64_t port = 0;
};
Address SplitAddress(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return {std::string(address), 0};
  Address split{std::string(address.substr(0, colon)), 0};
  for (const char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9') return {std::string(address), 0};
    split.port = split.port * 10 + (c - '0');
  }
  return split;
}

// The partitions that have an owner, each a slot range of CLUSTER SLOTS and SHARDS.
std::vector<uint32_t> OwnedPartitions(const cluster::Topology& topology) {
  std::vector<uint32_t> owned;
  for (uint32_t p = 0; p < topology.partitions.size(); ++p) {
    if (!topology.partitions[p].owner_address.empty()) owned.push_back(p);
  }
  return owned;
}

// One node of a CLUSTER SLOTS range: host, port, id.
void SlotsNode(ReplyWriter& reply, std::string_view address, std::string_view id) {
  const Address split = SplitAddress(address);
  reply.ArrayHeader(3);
  reply.Bulk(split.host);
  reply.Integer(split.port);
  reply.Bulk(id);
}

void Slots(CommandContext& ctx, const cluster::Topology& topology) {
  const std::vector<uint32_t> owned = OwnedPartitions(topology);
  ctx.reply.ArrayHeader(owned.size());
  for (const uint32_t p : owned) {
    const cluster::TopologyPartition& partition = topology.partitions[p];
    const auto standbys = topology.Standbys(p);
    ctx.reply.ArrayHeader(3 + standbys.size());
    ctx.reply.Integer(partition.slots.first);
    ctx.reply.Integer(partition.slots.last);
    SlotsNode(ctx.reply, partition.owner_address, partition.owner_id);
    for (const cluster::TopologyNode* standby : standbys) {
      SlotsNode(ctx.reply, standby->redis_address, standby->node_id);
    }
  }
}

// One node of a CLUSTER SHARDS shard (Redis 7's map).
void ShardNode(ReplyWriter& reply, std::string_view id, std::string_view address, bool owner,
               bool live, uint64_t offset) {
  const Address split = SplitAddress(address);
  reply.MapHeader(7);
  reply.Bulk("id");
  reply.Bulk(id);
  reply.Bulk("port");
  reply.Integer(split.port);
  reply.Bulk("ip");
  reply.Bulk(split.host);
  reply.Bulk("endpoint");
  reply.Bulk(split.host);
  reply.Bulk("role");
  reply.Bulk(owner ? "master" : "replica");
  reply.Bulk("replication-offset");
  reply.Integer(static_cast<int64_t>(offset));
  reply.Bulk("health");
  reply.Bulk(live ? "online" : "failed");
}

void Shards(CommandContext& ctx, const cluster::Topology& topology) {
  const std::vector<uint32_t> owned = OwnedPartitions(topology);
  ctx.reply.ArrayHeader(owned.size());
  for (const uint32_t p : owned) {
    const cluster::TopologyPartition& partition = topology.partitions[p];
    const auto standbys = topology.Standbys(p);
    const cluster::TopologyNode* owner = topology.Node(partition.owner_id);
    ctx.reply.MapHeader(2);
    ctx.reply.Bulk("slots");
    ctx.reply.ArrayHeader(2);
    ctx.reply.Integer(partition.slots.first);
    ctx.reply.Integer(partition.slots.last);
    ctx.reply.Bulk("nodes");
    ctx.reply.ArrayHeader(1 + standbys.size());
    ShardNode(ctx.reply, partition.owner_id, partition.owner_address, true,
              owner != nullptr && owner->live, partition.owner_seq);
    for (const cluster::TopologyNode* standby : standbys) {
      // Only this node knows how far it has applied; the others are shown at the owner's.
      ShardNode(ctx.reply, standby->node_id, standby->redis_address, false, true,
                standby->self ? partition.applied_seq : partition.owner_seq);
    }
  }
}

// The slot ranges of the partitions whose latest claim is the node's, as CLUSTER NODES lists
// them ("0-1023 1024-2047"): the same owners as CLUSTER SLOTS.
std::string SlotRanges(const cluster::Topology& topology, std::string_view node_id) {
  std::string ranges;
  for (const cluster::TopologyPartition& partition : topology.partitions) {
    if (partition.owner_id != node_id) continue;
    if (!ranges.empty()) ranges += ' ';
    ranges += fmt::format("{}-{}", partition.slots.first, partition.slots.last);
  }
  return ranges;
}

void Nodes(CommandContext& ctx, const cluster::Topology& topology) {
  std::string text;
  for (const cluster::TopologyNode& node : topology.nodes) {
    if (node.redis_address.empty()) continue;
    const Address split = SplitAddress(node.redis_address);
    const int64_t bus_port = split.port + 10000 <= 65535 ? split.port + 10000 : 0;
    std::string flags = node.self ? "myself,master" : "master";
    if (!node.live) flags += ",fail";
    const std::string ranges = SlotRanges(topology, node.node_id);
    fmt::format_to(std::back_inserter(text), "{} {}:{}@{} {} - 0 0 {} {}{}{}\n", node.node_id,
                   split.host, split.port, bus_port, flags, topology.epoch,
                   node.live ? "connected" : "disconnected", ranges.empty() ? "" : " ", ranges);
  }
  ctx.reply.Verbatim(text);
}

// Counts of slots by how they are served: with a live owner, with a silent owner, without.
struct SlotCounts {
  uint32_t assigned = 0;
  uint32_t ok = 0;
  uint32_t pfail = 0;
};
SlotCounts CountSlots(const cluster::Topology& topology) {
  SlotCounts counts;
  for (const cluster::TopologyPartition& partition : topology.partitions) {
    const uint32_t slots = partition.slots.last - partition.slots.first + 1;
    if (partition.owner_address.empty()) continue;
    counts.assigned += slots;
    if (partition.route == cluster::Route::kTryAgain ||
        partition.route == cluster::Route::kUnconfirmed) {
      counts.pfail += slots;
    } else {
      counts.ok += slots;
    }
  }
  return counts;
}

void Info(CommandContext& ctx, const cluster::Topology& topology) {
  const SlotCounts counts = CountSlots(topology);
  const size_t live = static_cast<size_t>(std::count_if(
      topology.nodes.begin(), topology.nodes.end(), [](const auto& node) { return node.live; }));
  const size_t owners = static_cast<size_t>(
      std::count_if(topology.nodes.begin(), topology.nodes.end(),
                    [](const auto& node) { return node.live && !node.owned.empty(); }));
  // "ok" once every slot has an owner: a slot changing hands stays ok (its clients retry);
  // ioredis reconnects while a node says "fail".
  ctx.reply.Verbatim(
      fmt::format("cluster_state:{}\r\ncluster_slots_assigned:{}\r\ncluster_slots_ok:{}\r\n"
                  "cluster_slots_pfail:{}\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\n"
                  "cluster_size:{}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{}\r\n"
                  "tally_live_nodes:{}\r\ntally_partitions:{}\r\n",
                  counts.assigned == kSlotCount ? "ok" : "fail", counts.assigned, counts.ok,
                  counts.pfail, topology.nodes.size(), owners, topology.epoch, topology.epoch, live,
                  topology.partition_count));
}

}  // namespace

void Cluster(CommandContext& ctx) {
  cluster::Routing* routing = ctx.server.cluster();
  if (routing == nullptr) {
    ctx.reply.Error(kDisabled);
    return;
  }
  const std::string_view sub = ctx.args[1];
  const auto topology = routing->topology();
  if (EqualsIgnoreCase(sub, "SLOTS") && ctx.args.size() == 2) {
    Slots(ctx, *topology);
  } else if (EqualsIgnoreCase(sub, "SHARDS") && ctx.args.size() == 2) {
    Shards(ctx, *topology);
  } else if (EqualsIgnoreCase(sub, "NODES") && ctx.args.size() == 2) {
    Nodes(ctx, *topology);
  } else if (EqualsIgnoreCase(sub, "INFO") && ctx.args.size() == 2) {
    Info(ctx, *topology);
  } else if (EqualsIgnoreCase(sub, "MYID") && ctx.args.size() == 2) {
    ctx.reply.Bulk(topology->self_id);
  } else if (EqualsIgnoreCase(sub, "KEYSLOT") && ctx.args.size() == 3) {
    ctx.reply.Integer(KeySlot(ctx.args[2]));
  } else {
    ReplyUnknownSubcommand(ctx, "CLUSTER");
  }
}

// CLUSTER.DRAIN [CANCEL]: a separate command, not a CLUSTER subcommand, so that ACLs can
// keep it from the users that only route (ACL rules name commands, not subcommands).
void ClusterDrain(CommandContext& ctx) {
  cluster::Routing* routing = ctx.server.cluster();
  if (routing == nullptr) {
    ctx.reply.Error(kDisabled);
    return;
  }
  if (ctx.args.size() == 1) {
    routing->RequestDrain(true);
  } else if (ctx.args.size() == 2 && EqualsIgnoreCase(ctx.args[1], "CANCEL")) {
    routing->RequestDrain(false);
  } else {
    ctx.reply.Error("ERR syntax error: CLUSTER.DRAIN [CANCEL]");
    return;
  }
  ctx.reply.SimpleString("OK");
}

void ReadOnly(CommandContext& ctx) {
  if (ctx.server.cluster() == nullptr) {
    ctx.reply.Error(kDisabled);
    return;
  }
  ctx.session.set_readonly(true);
  ctx.reply.SimpleString("OK");
}

void ReadWrite(CommandContext& ctx) {
  if (ctx.server.cluster() == nullptr) {
    ctx.reply.Error(kDisabled);
    return;
  }
  ctx.session.set_readonly(false);
  ctx.reply.SimpleString("OK");
}

// No slot ever migrates key by key here (a partition changes hands whole), so no ASK is ever
// sent; ASKING is accepted for the clients that send it anyway.
void Asking(CommandContext& ctx) {
  if (ctx.server.cluster() == nullptr) {
    ctx.reply.Error(kDisabled);
    return;
  }
  ctx.reply.SimpleString("OK");
}

void ClusterSection(CommandContext& ctx, std::string& out) {
  cluster::Routing* routing = ctx.server.cluster();
  if (routing == nullptr) {
    out += "# Cluster\r\ncluster_enabled:0\r\n";
    return;
  }
  const auto topology = routing->topology();
  const cluster::TopologyNode* self = topology->Node(topology->self_id);
  fmt::format_to(std::back_inserter(out),
                 "# Cluster\r\ncluster_enabled:1\r\ntally_cluster_name:{}\r\ntally_node_id:{}\r\n"
                 "tally_node_name:{}\r\ntally_nats_connected:{}\r\ntally_nats_url:{}\r\n"
                 "tally_nats_reconnects:{}\r\ntally_partitions:{}\r\ntally_partitions_owned:{}\r\n"
                 "tally_draining:{}\r\ntally_snapshots_written:{}\r\ntally_snapshot_restores:{}\r\n"
                 "tally_stream_trims:{}\r\ntally_snapshot_failures:{}\r\n",
                 topology->cluster_name, topology->self_id, self != nullptr ? self->name : "",
                 topology->nats_connected ? 1 : 0, topology->nats_url, topology->nats_reconnects,
                 topology->partition_count, self != nullptr ? self->owned.size() : 0,
                 routing->drain_requested() ? 1 : 0, topology->snapshots_written,
                 topology->snapshot_restores, topology->stream_trims, topology->snapshot_failures);
  const cluster::ChangeStreamStats& changes = topology->changes;
  fmt::format_to(std::back_inserter(out),
                 "tally_changes_read:{}\r\ntally_changes_catalog:{}\r\ntally_changes_floor:{}\r\n"
                 "tally_changes_trims:{}\r\ntally_changes_trimmed_below:{}\r\n"
                 "tally_catalog_restored:{}\r\n",
                 changes.read, changes.catalog, changes.floor, changes.trims, changes.trimmed_below,
                 changes.catalog_restored ? 1 : 0);
  for (size_t i = 0; i < topology->nodes.size(); ++i) {
    const cluster::TopologyNode& node = topology->nodes[i];
    fmt::format_to(std::back_inserter(out),
                   "node{}:id={},name={},address={},live={},self={},owned={},draining={}\r\n", i,
                   node.node_id, node.name, node.redis_address, node.live ? 1 : 0,
                   node.self ? 1 : 0, node.owned.size(), node.draining ? 1 : 0);
  }
  for (uint32_t p = 0; p < topology->partitions.size(); ++p) {
    const cluster::TopologyPartition& partition = topology->partitions[p];
    const uint64_t lag = partition.owner_seq > partition.applied_seq
                             ? partition.owner_seq - partition.applied_seq
                             : 0;
    fmt::format_to(std::back_inserter(out),
                   "partition{}:slots={}-{},role={},owner={},owner_address={},term={},applied={},"
                   "owner_seq={},lag={},owner_silent_ms={},snapshot_seq={},trimmed_below={}",
                   p, partition.slots.first, partition.slots.last, partition.role,
                   partition.owner_name, partition.owner_address, partition.term,
                   partition.applied_seq, partition.owner_seq, lag, partition.owner_silent_ms,
                   partition.snapshot_seq, partition.trimmed_below);
    if (!partition.log_server.empty()) {
      fmt::format_to(std::back_inserter(out), ",log_server={}", partition.log_server);
    }
    if (partition.restoring) {
      fmt::format_to(std::back_inserter(out), ",restoring={}/{}", partition.restored_counters,
                     partition.restore_counters);
    }
    out += "\r\n";
  }
}

}  // namespace tally::redis::commands
