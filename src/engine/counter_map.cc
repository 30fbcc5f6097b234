#include "engine/counter_map.h"

#include <cassert>

namespace tally::engine {
namespace {

constexpr uint32_t kInitialCapacity = 16;
// Grow past 80% full: linear probing stays short and the tags keep most probes in the index.
constexpr uint64_t kMaxLoadPercent = 80;

}  // namespace

CounterMap::CounterMap() { Clear(); }

CounterMap::~CounterMap() {
  for (EntryId id = 0; id < next_unused_; ++id) {
    Entry& entry = At(id);
    if (!entry.IsFree()) ReleaseKey(entry);
  }
}

void CounterMap::Clear() {
  for (EntryId id = 0; id < next_unused_; ++id) {
    Entry& entry = At(id);
    if (!entry.IsFree()) ReleaseKey(entry);
  }
  chunks_.clear();
  slots_ = PageArray<uint32_t>(kInitialCapacity);
  mask_ = kInitialCapacity - 1;
  size_ = 0;
  heap_key_bytes_ = 0;
  next_unused_ = 0;
  free_head_ = kNoEntry;
}

std::string_view CounterMap::key(EntryId id) const {
  const Entry& entry = At(id);
  if (entry.meta() & kHeapKey) {
    const char* data;
    uint32_t length;
    std::memcpy(&data, entry.key_bytes, sizeof data);
    std::memcpy(&length, entry.key_bytes + 8, sizeof length);
    return {data, length};
  }
  return {reinterpret_cast<const char*>(entry.key_bytes),
          static_cast<size_t>(entry.meta() & kLengthMask)};
}

CounterMap::EntryId CounterMap::Find(const HashedKey& key) const {
  const uint32_t tag = Tag(key.hash);
  for (uint32_t slot = HomeSlot(key.hash);; slot = (slot + 1) & mask_) {
    const uint32_t word = slots_[slot];
    if (word == 0) return kNoEntry;
    if ((word & 0xFF) == tag) {
      const EntryId id = (word >> 8) - 1;
      if (this->key(id) == key.key) return id;
    }
  }
}

CounterMap::EntryId CounterMap::FirstCandidate(uint64_t hash) const {
  const uint32_t tag = Tag(hash);
  for (uint32_t slot = HomeSlot(hash);; slot = (slot + 1) & mask_) {
    const uint32_t word = slots_[slot];
    if (word == 0) return kNoEntry;
    if ((word & 0xFF) == tag) return (word >> 8) - 1;
  }
}

void CounterMap::PrefetchEntry(uint64_t hash) const {
  const EntryId id = FirstCandidate(hash);
  if (id == kNoEntry) return;
  // 24-byte entries: one may straddle two cache lines.
  const char* entry = reinterpret_cast<const char*>(&At(id));
  __builtin_prefetch(entry);
  __builtin_prefetch(entry + sizeof(Entry) - 1);
}

void CounterMap::PrefetchHeapKey(uint64_t hash) const {
  const EntryId id = FirstCandidate(hash);
  if (id == kNoEntry) return;
  const Entry& entry = At(id);
  if ((entry.meta() & kHeapKey) == 0) return;
  const char* data;
  std::memcpy(&data, entry.key_bytes, sizeof data);
  __builtin_prefetch(data);  // null for a free entry: a prefetch never faults
}

CounterMap::EntryId CounterMap::FindOrInsert(const HashedKey& key, bool* inserted) {
  const EntryId found = Find(key);
  *inserted = found == kNoEntry;
  return *inserted ? Insert(key) : found;
}

CounterMap::EntryId CounterMap::Insert(const HashedKey& key) {
  if ((size_ + 1) * 100 > (uint64_t{mask_} + 1) * kMaxLoadPercent) Grow();
  const EntryId id = AllocateEntry();
  Entry& entry = At(id);
  entry.value = 0;
  StoreKey(entry, key.key);
  PlaceInIndex(id, key.hash);
  ++size_;
  return id;
}

void CounterMap::PlaceInIndex(EntryId id, uint64_t hash) {
  uint32_t slot = HomeSlot(hash);
  while (slots_[slot] != 0) slot = (slot + 1) & mask_;
  slots_[slot] = ((id + 1) << 8) | Tag(hash);
}

void CounterMap::Erase(EntryId id) {
  const uint64_t hash = HashKey(key(id));
  uint32_t slot = HomeSlot(hash);
  while ((slots_[slot] >> 8) != id + 1) slot = (slot + 1) & mask_;
  // Backward-shift deletion: pull later members of the probe run into the hole so that no
  // tombstones are needed and lookups stay as short as at insertion.
  uint32_t hole = slot;
  for (uint32_t next = (hole + 1) & mask_; slots_[next] != 0; next = (next + 1) & mask_) {
    const EntryId other = (slots_[next] >> 8) - 1;
    const uint32_t home = HomeSlot(HashKey(key(other)));
    // Move `next` into the hole unless its home lies cyclically in (hole, next].
    const bool home_after_hole = ((next - home) & mask_) < ((next - hole) & mask_);
    if (!home_after_hole) {
      slots_[hole] = slots_[next];
      hole = next;
    }
  }
  slots_[hole] = 0;

  Entry& entry = At(id);
  ReleaseKey(entry);
  entry.MarkFree();
  entry.value = free_head_;
  free_head_ = id;
  --size_;
}

CounterMap::EntryId CounterMap::AllocateEntry() {
  if (free_head_ != kNoEntry) {
    const EntryId id = free_head_;
    free_head_ = static_cast<EntryId>(At(id).value);
    return id;
  }
  const EntryId id = next_unused_++;
  if ((id >> kChunkShift) >= chunks_.size()) {
    chunks_.emplace_back(size_t{1} << kChunkShift);
  }
  return id;
}

void CounterMap::StoreKey(Entry& entry, std::string_view key) {
  if (key.size() <= kInlineKeyMax) {
    std::memcpy(entry.key_bytes, key.data(), key.size());
    entry.meta() = static_cast<uint8_t>(key.size());
    return;
  }
  char* copy = new char[key.size()];
  std::memcpy(copy, key.data(), key.size());
  const auto length = static_cast<uint32_t>(key.size());
  std::memcpy(entry.key_bytes, &copy, sizeof copy);
  std::memcpy(entry.key_bytes + 8, &length, sizeof length);
  entry.meta() = kHeapKey;
  heap_key_bytes_ += key.size();
}

void CounterMap::ReleaseKey(Entry& entry) {
  if (entry.meta() & kHeapKey) {
    char* data;
    uint32_t length;
    std::memcpy(&data, entry.key_bytes, sizeof data);
    std::memcpy(&length, entry.key_bytes + 8, sizeof length);
    heap_key_bytes_ -= length;
    delete[] data;
  }
}

void CounterMap::Grow() {
  const uint32_t capacity = (mask_ + 1) * 2;
  slots_ = PageArray<uint32_t>(capacity);
  mask_ = capacity - 1;
  for (EntryId id = 0; id < next_unused_; ++id) {
    if (!At(id).IsFree()) PlaceInIndex(id, HashKey(key(id)));
  }
}

size_t CounterMap::MemoryBytes() const {
  return (size_t{mask_} + 1) * sizeof(uint32_t) +
         chunks_.size() * (size_t{1} << kChunkShift) * sizeof(Entry) + heap_key_bytes_;
}

}  // namespace tally::engine
