#include "servers/http/cluster_json.h"

#include "core/json_writer.h"

namespace tally::http {

std::string_view RouteName(cluster::Route route) {
  switch (route) {
    case cluster::Route::kServe:
      return "serve";
    case cluster::Route::kServeReads:
      return "serve-reads";
    case cluster::Route::kMoved:
      return "moved";
    case cluster::Route::kTryAgain:
      return "try-again";
    case cluster::Route::kDown:
      return "down";
    case cluster::Route::kUnconfirmed:
      return "unconfirmed";
  }
  return "down";
}

std::string ClusterJson(const cluster::Topology& topology) {
  JsonWriter json;
  json.BeginObject();
  json.Key("cluster_enabled").Bool(true);
  json.Key("name").String(topology.cluster_name);
  json.Key("node_id").String(topology.self_id);
  json.Key("epoch").UInt(topology.epoch);
  json.Key("nats").BeginObject();
  json.Key("connected").Bool(topology.nats_connected);
  json.Key("url").String(topology.nats_url);
  json.Key("reconnects").UInt(topology.nats_reconnects);
  json.EndObject();
  json.Key("snapshots").BeginObject();
  json.Key("written").UInt(topology.snapshots_written);
  json.Key("restores").UInt(topology.snapshot_restores);
  json.Key("trims").UInt(topology.stream_trims);
  json.Key("failures").UInt(topology.snapshot_failures);
  json.EndObject();
  json.Key("changes").BeginObject();
  json.Key("read").UInt(topology.changes.read);
  json.Key("catalog").UInt(topology.changes.catalog);
  json.Key("floor").UInt(topology.changes.floor);
  json.Key("trims").UInt(topology.changes.trims);
  json.Key("trimmed_below").UInt(topology.changes.trimmed_below);
  json.Key("catalog_restored").Bool(topology.changes.catalog_restored);
  json.EndObject();
  json.Key("nodes").BeginArray();
  for (const cluster::TopologyNode& node : topology.nodes) {
    json.BeginObject();
    json.Key("id").String(node.node_id);
    json.Key("name").String(node.name);
    json.Key("redis_address").String(node.redis_address);
    json.Key("http_address").String(node.http_address);
    json.Key("live").Bool(node.live);
    json.Key("self").Bool(node.self);
    json.Key("draining").Bool(node.draining);
    json.Key("owned").BeginArray();
    for (const uint32_t p : node.owned) json.UInt(p);
    json.EndArray();
    json.EndObject();
  }
  json.EndArray();
  json.Key("partition_count").UInt(topology.partition_count);
  json.Key("partitions").BeginArray();
  for (uint32_t p = 0; p < topology.partitions.size(); ++p) {
    const cluster::TopologyPartition& partition = topology.partitions[p];
    json.BeginObject();
    json.Key("partition").UInt(p);
    json.Key("slots")
        .BeginArray()
        .UInt(partition.slots.first)
        .UInt(partition.slots.last)
        .EndArray();
    json.Key("role").String(partition.role);
    json.Key("route").String(RouteName(partition.route));
    json.Key("owner");
    if (partition.owner_id.empty()) {
      json.Null();
    } else {
      json.BeginObject();
      json.Key("id").String(partition.owner_id);
      json.Key("name").String(partition.owner_name);
      json.Key("redis_address").String(partition.owner_address);
      json.EndObject();
    }
    json.Key("standbys").BeginArray();
    for (const cluster::TopologyNode* standby : topology.Standbys(p)) json.String(standby->name);
    json.EndArray();
    json.Key("term").UInt(partition.term);
    json.Key("applied_seq").UInt(partition.applied_seq);
    json.Key("owner_seq").UInt(partition.owner_seq);
    json.Key("lag").UInt(partition.owner_seq > partition.applied_seq
                             ? partition.owner_seq - partition.applied_seq
                             : 0);
    json.Key("owner_silent_ms").Int(partition.owner_silent_ms);
    json.Key("detail").String(partition.detail);
    json.Key("log_server");
    if (partition.log_server.empty()) {
      json.Null();
    } else {
      json.String(partition.log_server);
    }
    json.Key("snapshot_seq").UInt(partition.snapshot_seq);
    json.Key("trimmed_below").UInt(partition.trimmed_below);
    json.Key("restore");
    if (partition.restoring) {
      json.BeginObject();
      json.Key("counters").UInt(partition.restored_counters);
      json.Key("of").UInt(partition.restore_counters);
      json.EndObject();
    } else {
      json.Null();
    }
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  return json.Take();
}

}  // namespace tally::http
