#include "core/slot.h"

#include <array>

namespace tally {
namespace {

// The CRC of each byte value, most significant bit first.
constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    }
    table[byte] = static_cast<uint16_t>(crc);
  }
  return table;
}

constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

}  // namespace

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (const char c : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ static_cast<uint8_t>(c))]);
  }
  return crc;
}

uint32_t KeySlot(std::string_view key) {
  // As redis-server: the tag is what lies between the first '{' and the first '}' after
  // it; a missing '}' or an empty tag ("{}") means the whole key is hashed.
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & (kSlotCount - 1);
}

SlotRange PartitionSlots(uint32_t partition, uint32_t partition_count) {
  const auto first = static_cast<uint32_t>(uint64_t{partition} * kSlotCount / partition_count);
  const auto end = static_cast<uint32_t>(uint64_t{partition + 1} * kSlotCount / partition_count);
  return SlotRange{first, end - 1};
}

uint32_t SlotPartition(uint32_t slot, uint32_t partition_count) {
  // The largest p with p * kSlotCount / P <= slot, that is p * kSlotCount < (slot + 1) * P.
  return static_cast<uint32_t>((uint64_t{slot + 1} * partition_count - 1) / kSlotCount);
}

std::string PartitionTag(uint32_t partition, uint32_t partition_count) {
  const SlotRange range = PartitionSlots(partition, partition_count);
  // Every range holds at least one slot and CRC16 spreads "p<n>" over all of them, so the
  // search ends after about partition_count tries; the bound only guards the loop.
  for (uint32_t n = 0; n < 64 * kSlotCount; ++n) {
    std::string tag = "p";
    tag += std::to_string(n);
    const uint32_t slot = KeySlot(tag);
    if (range.Contains(slot)) return tag;
  }
  return {};
}

}  // namespace tally
