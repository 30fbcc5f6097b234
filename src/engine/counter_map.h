// CounterMap: the compact in-memory map of one stripe, from key bytes to a signed 64-bit
// value. Not thread-safe: the owning stripe's mutex guards it.
//
// Memory is what lets one node hold tens of millions of counters, so the layout is tight:
//   entries  24 bytes each, in fixed chunks (no reallocation, so an entry never moves):
//              int64 value | 16 key bytes: up to 15 key bytes inline + 1 meta byte, or a
//              pointer and length to a heap copy for longer keys
//   index    open addressing with linear probing, 4 bytes a slot:
//              (entry number + 1) << 8 | 8 bits of the hash (the tag)
// An entry's number is stable while the key is present, which is what SCAN cursors use:
// a key present for a whole scan is returned exactly once, whatever resizes happen.
// Freed entries go on a free list and are reused.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "core/page_array.h"
#include "engine/key_hash.h"

namespace tally::engine {

class CounterMap {
 public:
  using EntryId = uint32_t;
  static constexpr EntryId kNoEntry = UINT32_MAX;

  // Flags kept in each entry's meta byte for the stripe's bookkeeping.
  static constexpr uint8_t kDirty = 0x40;            // changed since the last commit drain
  static constexpr uint8_t kHasExpiry = 0x20;        // has a deadline in the expiry map
  static constexpr uint8_t kCheckpointDirty = 0x10;  // committed since the last checkpoint

  CounterMap();
  ~CounterMap();
  CounterMap(const CounterMap&) = delete;
  CounterMap& operator=(const CounterMap&) = delete;

  // The entry holding `key`, or kNoEntry.
  EntryId Find(const HashedKey& key) const;

  // Inserts `key` with value 0 and no flags. REQUIRES: `key` is absent.
  EntryId Insert(const HashedKey& key);

  // The entry holding `key`, inserted with value 0 and no flags when missing.
  // `inserted` tells which.
  EntryId FindOrInsert(const HashedKey& key, bool* inserted);

  // Removes the entry. REQUIRES: `id` is present.
  void Erase(EntryId id);

  // Prefetching for a batch of lookups (see View::Prefetch). Each stage reads only what the
  // stage before brought into the cache — the home slot, then the entry a tag points to,
  // then that entry's heap key — so running each stage over a whole batch before the next
  // overlaps the batch's cache misses instead of paying them one after another. Hints
  // only: they change nothing, and cost little for an absent key.
  void PrefetchSlot(uint64_t hash) const { __builtin_prefetch(&slots_[HomeSlot(hash)]); }
  void PrefetchEntry(uint64_t hash) const;
  void PrefetchHeapKey(uint64_t hash) const;

  void Clear();

  int64_t& value(EntryId id) { return At(id).value; }
  int64_t value(EntryId id) const { return At(id).value; }
  std::string_view key(EntryId id) const;
  bool HasFlag(EntryId id, uint8_t flag) const { return (At(id).meta() & flag) != 0; }
  void SetFlag(EntryId id, uint8_t flag) { At(id).meta() |= flag; }
  void ClearFlag(EntryId id, uint8_t flag) { At(id).meta() &= static_cast<uint8_t>(~flag); }

  size_t size() const { return size_; }

  // One past the highest entry number ever handed out: the range SCAN walks.
  EntryId entry_limit() const { return next_unused_; }
  bool IsLive(EntryId id) const { return id < next_unused_ && !At(id).IsFree(); }

  // Bytes held by the index, the entries and the heap copies of long keys.
  size_t MemoryBytes() const;

 private:
  // meta byte := heap:1 dirty:1 has-expiry:1 checkpoint-dirty:1 inline-length:4
  // A free entry is marked as a heap key with a null pointer.
  static constexpr uint8_t kHeapKey = 0x80;
  static constexpr uint8_t kLengthMask = 0x0F;
  static constexpr size_t kInlineKeyMax = 15;
  static constexpr size_t kChunkShift = 12;  // 4096 entries (96 KiB) a chunk

  struct Entry {
    int64_t value;  // also the next free entry while on the free list
    unsigned char key_bytes[16];

    uint8_t& meta() { return key_bytes[15]; }
    uint8_t meta() const { return key_bytes[15]; }
    bool IsFree() const {
      if ((meta() & kHeapKey) == 0) return false;
      const char* data;
      std::memcpy(&data, key_bytes, sizeof data);
      return data == nullptr;
    }
    void MarkFree() {
      std::memset(key_bytes, 0, sizeof key_bytes);
      meta() = kHeapKey;
    }
  };
  static_assert(sizeof(Entry) == 24);

  Entry& At(EntryId id) { return chunks_[id >> kChunkShift][id & ((1u << kChunkShift) - 1)]; }
  // Index and entries live in PageArrays (mmap): see core/page_array.h for why.
  const Entry& At(EntryId id) const {
    return chunks_[id >> kChunkShift][id & ((1u << kChunkShift) - 1)];
  }
  // The entry of the first slot from the home slot on whose tag matches, or kNoEntry.
  EntryId FirstCandidate(uint64_t hash) const;
  EntryId AllocateEntry();
  void StoreKey(Entry& entry, std::string_view key);
  void ReleaseKey(Entry& entry);
  uint32_t HomeSlot(uint64_t hash) const { return static_cast<uint32_t>(hash) & mask_; }
  static uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash >> 40) & 0xFF; }
  void Grow();
  void PlaceInIndex(EntryId id, uint64_t hash);

  PageArray<uint32_t> slots_;
  uint32_t mask_ = 0;  // capacity - 1
  size_t size_ = 0;
  size_t heap_key_bytes_ = 0;
  std::vector<PageArray<Entry>> chunks_;
  EntryId next_unused_ = 0;
  EntryId free_head_ = kNoEntry;
};

}  // namespace tally::engine
