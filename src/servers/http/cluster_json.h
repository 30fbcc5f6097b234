// The JSON of GET /v1/cluster: a cluster node's view of its cluster (cluster/routing.h's
// topology) — the NATS connection, the nodes, and per partition its slots, this node's role,
// the route a request gets here, the owner, the standbys, the positions and the lag.
#pragma once

#include <string>

#include "cluster/routing.h"

namespace tally::http {

// {"cluster_enabled":true,"name":...,"node_id":...,"nats":{...},"nodes":[...],
//  "partitions":[...]} (docs/openapi.json has every field).
std::string ClusterJson(const cluster::Topology& topology);

// The name of a route as JSON and INFO show it: "serve", "serve-reads", "moved", "try-again",
// "down".
std::string_view RouteName(cluster::Route route);

}  // namespace tally::http
