#include "servers/redis/cluster_redirect.h"

#include <fmt/format.h>

#include "core/slot.h"

namespace tally::redis {

KeysSlot SlotOfKeys(std::span<const std::string_view> args, std::span<const size_t> positions) {
  KeysSlot result;
  result.slot = KeySlot(args[positions[0]]);
  for (size_t i = 1; i < positions.size(); ++i) {
    if (KeySlot(args[positions[i]]) != result.slot) {
      result.error = "CROSSSLOT Keys in request don't hash to the same slot";
      break;
    }
  }
  return result;
}

std::string ClusterRefusal(const cluster::Routing& routing, uint32_t slot, bool write,
                           bool readonly) {
  const uint32_t partition = routing.PartitionOf(slot);
  const cluster::Route route = routing.route(partition);
  if (route == cluster::Route::kServe || (route == cluster::Route::kServeReads && !write)) {
    return {};
  }
  if (route == cluster::Route::kServeReads) {
    return fmt::format(
        "CLUSTERDOWN The stream of slot {} does not answer this node now (no quorum, or the node "
        "is cut off): the write was refused and counted nothing",
        slot);
  }
  // Past the read lease a READONLY read is served like a standby's: the values as far as
  // this node has them, which may lag.
  if (route == cluster::Route::kUnconfirmed) {
    if (readonly && !write) return {};
    return fmt::format(
        "CLUSTERDOWN The stream of slot {} has not confirmed this node's ownership lately: "
        "another node may own it now, so nothing is read or written here",
        slot);
  }
  const auto topology = routing.topology();
  const cluster::TopologyPartition* part =
      partition < topology->partitions.size() ? &topology->partitions[partition] : nullptr;
  // A standby holds the slot's values as far as it has applied its stream; not while it
  // restores the partition from a snapshot (some counters are back, others not yet): the
  // read goes to the owner.
  if (readonly && !write && part != nullptr && part->role == "following" && !part->restoring &&
      (route == cluster::Route::kMoved || route == cluster::Route::kTryAgain)) {
    return {};
  }
  if (route == cluster::Route::kMoved && part != nullptr && !part->owner_address.empty()) {
    return fmt::format("MOVED {} {}", slot, part->owner_address);
  }
  if (route == cluster::Route::kTryAgain) {
    return fmt::format("TRYAGAIN Slot {} is changing hands ({}); retry shortly", slot,
                       part != nullptr ? part->detail : "");
  }
  return "CLUSTERDOWN Hash slot not served";
}

std::string ClusterKeylessRefusal(const CommandSpec& spec, std::span<const std::string_view> args) {
  if (spec.name == "select" && args.size() > 1 && args[1] != "0") {
    return "ERR SELECT is not allowed in cluster mode";
  }
  // A cluster's counters are plain: none keeps records for COUNTER.REPAIRSTATE to set.
  if (spec.name == "counter.repairstate") {
    return "ERR counter.repairstate is not offered in cluster mode (its counters keep no records: "
           "COUNTER.REPAIR sets them)";
  }
  return {};
}

bool ServesSlot(const cluster::Routing& routing, uint32_t slot) {
  const cluster::Route route = routing.route(routing.PartitionOf(slot));
  return route == cluster::Route::kServe || route == cluster::Route::kServeReads;
}

}  // namespace tally::redis
