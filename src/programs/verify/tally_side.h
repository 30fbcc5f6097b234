// `tally verify`'s side of tallyd: which counters it has (with their definitions compiled
// here as tallyd compiled them), a counter's groups, tallyd's clock and a source's stored
// position, all read over the Redis protocol.
//
// Errors are values: a lost connection, an error reply ("tallyd: <command>: …"), or a reply
// of an unexpected shape ("tallyd: <command> answered …").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/definitions/compiler.h"
#include "programs/verify/compare.h"
#include "programs/verify/progress.h"
#include "programs/verify/resp_client.h"

namespace tally::verify {

// A derived counter as COUNTER.LIST shows it.
struct Counter {
  std::string name;
  std::string source;
  std::string select;  // the definition's SELECT, to run on the source
  int64_t groups = 0;  // as COUNTER.LIST saw them
  // "counting", or "pending" / "backfilling": its groups are not whole yet (COUNTER.LIST's
  // "state"; counting when tallyd does not say).
  std::string state = "counting";
  // The definition compiled here: its SELECT, and its retention when it has one.
  std::shared_ptr<const definitions::CompiledCounter> compiled;
};

// Every counter tallyd has (COUNTER.LIST), compiled against its sources' schemas (SHOW
// SOURCES).
Result<std::vector<Counter>> ListCounters(RespClient& tally);

// The counter's groups in tallyd (COUNTER.SCAN), reported to `progress` as they come.
Result<Groups> TallyGroups(RespClient& tally, const Counter& counter, Progress& progress);

// tallyd's clock (TIME) in microseconds: the clock its retention follows.
Result<int64_t> ServerMicros(RespClient& tally);

}  // namespace tally::verify
