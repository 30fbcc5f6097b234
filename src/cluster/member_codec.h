// A cluster node's heartbeat (membership.h): what it says of itself, and its bytes — a few
// "name value" lines (the grammar is at the top of member_codec.cc). Read from whatever the
// members subject carries, so the decoder refuses anything malformed; no NATS, no engine
// (the fuzzer links it alone, in tally_cluster_records).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tally::cluster {

// What a node says of itself in its heartbeats.
struct MemberInfo {
  std::string node_id;              // 40 hex characters (ClusterTables::node_id)
  std::string node_name;            // no spaces or line breaks
  std::string redis_address;        // host:port, as MOVED names it
  std::string http_address;         // host:port
  std::vector<uint32_t> owned;      // partitions it owns, ascending
  std::vector<uint32_t> releasing;  // partitions it is handing over: claim them now
  bool leaving = false;             // stopping: every partition it owned is released
  bool draining = false;            // handing every partition over, claiming none (a drain)
  // Per partition, the stream sequence its last finished checkpoint saved (what a restart
  // reads on from): owners trim no record above the lowest a live node says. Empty: none.
  std::vector<uint64_t> checkpointed;
  // The change stream's sequence it would read from (ChangeFeed::ReadFloor): trimming keeps
  // it and what follows. 0: not said (it holds the whole stream).
  uint64_t change_floor = 0;
  uint64_t sequence = 0;  // grows with every heartbeat, across restarts
};

// The heartbeat's bytes, and back. DecodeMember refuses anything malformed.
std::string EncodeMember(const MemberInfo& info);
Result<MemberInfo> DecodeMember(std::string_view bytes);

}  // namespace tally::cluster
