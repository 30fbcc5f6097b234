// Where a keyed request goes in a cluster: served here, or refused with the reply Redis
// Cluster's clients act on (redis-py, ioredis and redis-cli -c route themselves by these):
//   -CROSSSLOT Keys in request don't hash to the same slot    (checked first, as Redis does)
//   -MOVED <slot> <host:port>        another node owns the slot: clients go there
//   -TRYAGAIN ...                    the slot changes hands: clients retry shortly
//   -CLUSTERDOWN ...                 not served now (no owner yet; a write while the slot's
//                                    stream has no quorum: refused, nothing counted)
// A connection in READONLY mode reads the slots this node follows (a standby's values may
// lag the owner's).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cluster/routing.h"
#include "servers/redis/command_table.h"

namespace tally::redis {

// The slot of the request's keys, or an error reply when they span slots. REQUIRES:
// positions not empty.
struct KeysSlot {
  uint32_t slot = 0;
  std::string error;  // CROSSSLOT
};
KeysSlot SlotOfKeys(std::span<const std::string_view> args, std::span<const size_t> positions);

// The error reply that refuses a request for `slot` here (`write`: it may change counters), or
// empty when it is served here. `readonly`: the connection sent READONLY.
std::string ClusterRefusal(const cluster::Routing& routing, uint32_t slot, bool write,
                           bool readonly);

// The refusal of a command that has no key, in a cluster: SELECT of a database other than 0,
// and tally verify's holds and repairs, are not offered. Empty when it may run.
std::string ClusterKeylessRefusal(const CommandSpec& spec, std::span<const std::string_view> args);

// Whether this node serves the slot's counters (owns its partition), for the commands that
// list or count the node's keys (SCAN, KEYS, DBSIZE) or flush them (FLUSHALL).
bool ServesSlot(const cluster::Routing& routing, uint32_t slot);

}  // namespace tally::redis
