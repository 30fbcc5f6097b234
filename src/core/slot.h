// Redis Cluster's hash slots, and tally's partitions of them.
//
// A key's slot is CRC16-CCITT (XMODEM) of the key modulo 16384, where only the bytes
// between the first '{' and the next '}' count when there are any ("hash tags": keys
// `user:{42}:likes` and `user:{42}:follows` share a slot). The same function as
// redis-server's keyHashSlot, so that cluster-aware Redis clients route keys themselves.
//
// A cluster of P partitions gives partition p the contiguous slot range
// [p * 16384 / P, (p + 1) * 16384 / P): one range per partition in CLUSTER SLOTS, and
// one key range per partition in a store whose keys begin with their slot.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tally {

inline constexpr uint32_t kSlotCount = 16384;
// The most partitions a cluster may have (one slot each at the very least).
inline constexpr uint32_t kMaxPartitions = kSlotCount;

// CRC16-CCITT in the XMODEM variant: polynomial 0x1021, initial value 0, no reflection.
// Crc16("123456789") == 0x31C3.
uint16_t Crc16(std::string_view bytes);

// The hash slot of a key (any bytes), in [0, kSlotCount).
uint32_t KeySlot(std::string_view key);

// The slots [first, last] of one partition; both ends included.
struct SlotRange {
  uint32_t first;
  uint32_t last;

  bool Contains(uint32_t slot) const { return slot >= first && slot <= last; }
};

// Whether any of `ranges` holds `slot`.
inline bool AnyContains(std::span<const SlotRange> ranges, uint32_t slot) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [slot](SlotRange range) { return range.Contains(slot); });
}

// REQUIRES: 0 < partition_count <= kMaxPartitions, partition < partition_count.
SlotRange PartitionSlots(uint32_t partition, uint32_t partition_count);

// The partition owning `slot`. REQUIRES: slot < kSlotCount, 0 < partition_count <=
// kMaxPartitions.
uint32_t SlotPartition(uint32_t slot, uint32_t partition_count);

// A short hash tag whose slot belongs to `partition`: the first of "p0", "p1", ... that
// falls in its range. Every node computes the same one, so tally's own per-partition
// records spelled with it (`...{p17}...`) route like the partition's counters.
// REQUIRES as PartitionSlots.
std::string PartitionTag(uint32_t partition, uint32_t partition_count);

}  // namespace tally
