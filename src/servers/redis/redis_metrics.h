// The Redis-protocol server's figures as metrics, read at scrape time from what the server
// keeps anyway (its clients, the workers' per-command calls and error tallies): counting
// them costs the dispatch nothing more.
#pragma once

#include "core/metrics.h"
#include "servers/redis/server_core.h"

namespace tally::redis {

// Registers tally_redis_* in `registry`. `core` must outlive the registry's last Render().
void RegisterRedisMetrics(ServerCore& core, metrics::Registry& registry);

}  // namespace tally::redis
