#include "programs/verify/repair.h"

#include <fmt/core.h>

#include <algorithm>
#include <string>

#include "programs/verify/source_states.h"

namespace tally::verify {
namespace {

// Groups per command: each batch is one atomic commit.
constexpr size_t kRepairBatch = 1000;
// Arguments per COUNTER.REPAIRSTATE at most: well within tallyd's limit on a command's
// arguments (--max-multibulk-length, 1,048,576 by default), however many records its groups
// keep.
constexpr size_t kMostArguments = 500'000;

// COUNTER.REPAIR of every difference of a plain counter.
Status RepairValues(const Counter& counter, RespClient& tally,
                    const std::vector<Difference>& diffs) {
  for (size_t begin = 0; begin < diffs.size(); begin += kRepairBatch) {
    std::vector<std::string> args = {"COUNTER.REPAIR", counter.name};
    for (size_t i = begin; i < std::min(diffs.size(), begin + kRepairBatch); ++i) {
      auto value = RepairValue(*counter.compiled, diffs[i].source);
      if (!value) {
        return InvalidArgument(fmt::format("counter {}: group {}: {}", counter.name, diffs[i].key,
                                           value.error().message));
      }
      args.push_back(diffs[i].key);
      args.push_back(std::to_string(*value));
    }
    if (auto repaired = tally.Check(args); !repaired) return tl::unexpected(repaired.error());
  }
  return OkStatus();
}

// COUNTER.REPAIRSTATE of the source's state of every difference of any other counter.
Status RepairStates(const Counter& counter, RespClient& tally, Source& source,
                    const std::vector<Difference>& diffs) {
  std::vector<std::string> keys;
  keys.reserve(diffs.size());
  for (const Difference& d : diffs) keys.push_back(d.key);
  auto states = SourceStates(source, counter, keys);
  if (!states) return tl::unexpected(states.error());
  const std::vector<std::string> empty = {"COUNTER.REPAIRSTATE", counter.name};
  std::vector<std::string> args = empty;
  size_t groups = 0;
  const auto send = [&]() -> Status {
    if (groups == 0) return OkStatus();
    if (auto repaired = tally.Check(args); !repaired) return tl::unexpected(repaired.error());
    args = empty;
    groups = 0;
    return OkStatus();
  };
  for (const GroupState& state : *states) {
    const size_t needed = 3 + 2 * state.records.size();
    if (empty.size() + needed > kMostArguments) {
      return InvalidArgument(
          fmt::format("counter {}: group {} keeps {} records, more than one command carries; drop "
                      "and create the counter again to count the source's rows again",
                      counter.name, state.key, Thousands(state.records.size())));
    }
    if (groups == kRepairBatch || args.size() + needed > kMostArguments) {
      if (auto sent = send(); !sent) return sent;
    }
    args.push_back(state.key);
    args.push_back(std::to_string(state.value));
    args.push_back(std::to_string(state.records.size()));
    for (const auto& [tag, value] : state.records) {
      args.push_back(tag);
      args.push_back(std::to_string(value));
    }
    ++groups;
  }
  return send();
}

}  // namespace

Status RepairCounter(const Counter& counter, RespClient& tally, Source& source,
                     const std::vector<Difference>& differences) {
  if (counter.compiled->layout() == definitions::Layout::kPlain) {
    return RepairValues(counter, tally, differences);
  }
  return RepairStates(counter, tally, source, differences);
}

}  // namespace tally::verify
