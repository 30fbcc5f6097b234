#include "engine/counter_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tally::engine {
namespace {

using EntryId = CounterMap::EntryId;

// Inserts `key` and asserts that it was missing.
EntryId InsertNew(CounterMap& map, std::string_view key) {
  bool inserted = false;
  const EntryId id = map.FindOrInsert(HashedKey(key), &inserted);
  EXPECT_TRUE(inserted) << "key of length " << key.size();
  return id;
}

std::string NumberedKey(size_t i) { return "k:" + std::to_string(i); }

// Keys of every shape the map stores differently: empty, inline up to 15 bytes, heap from 16,
// and binary keys with NUL bytes (which must not be cut at the first NUL).
std::vector<std::string> AssortedKeys() {
  std::vector<std::string> keys = {
      "",
      "a",
      std::string(1, '\0'),
      std::string(2, '\0'),
      std::string("a\0b", 3),
      std::string("a\0c", 3),
      "abc",
      std::string("abc\0", 4),
      std::string(14, 'x'),
      std::string(15, 'x'),  // the longest inline key
      std::string(16, 'x'),  // the shortest heap key
      std::string(15, '\0'),
      std::string(16, '\0'),
      std::string(17, 'x'),
      std::string(100, 'y'),
      std::string(5000, 'z'),
      std::string("\xff\xfe\x00\x01", 4),
  };
  std::string binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
  keys.push_back(binary);
  keys.push_back(binary.substr(0, 15));
  keys.push_back(binary.substr(0, 16));
  return keys;
}

TEST(CounterMap, EmptyMap) {
  CounterMap map;
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.entry_limit(), 0u);
  EXPECT_FALSE(map.IsLive(0));
  EXPECT_EQ(map.Find(HashedKey("missing")), CounterMap::kNoEntry);
  EXPECT_EQ(map.Find(HashedKey("")), CounterMap::kNoEntry);
  EXPECT_GT(map.MemoryBytes(), 0u);
}

TEST(CounterMap, StoresKeysOfEveryShape) {
  CounterMap map;
  const std::vector<std::string> keys = AssortedKeys();
  std::vector<EntryId> ids;
  for (size_t i = 0; i < keys.size(); ++i) {
    const EntryId id = InsertNew(map, keys[i]);
    map.value(id) = static_cast<int64_t>(i) * 1000 - 7;
    ids.push_back(id);
  }
  ASSERT_EQ(map.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(map.Find(HashedKey(keys[i])), ids[i]);
    EXPECT_EQ(map.key(ids[i]), keys[i]);
    EXPECT_EQ(map.key(ids[i]).size(), keys[i].size());
    EXPECT_EQ(map.value(ids[i]), static_cast<int64_t>(i) * 1000 - 7);
    bool inserted = true;
    EXPECT_EQ(map.FindOrInsert(HashedKey(keys[i]), &inserted), ids[i]);
    EXPECT_FALSE(inserted);
  }
  // A string_view without data is the same empty key.
  EXPECT_EQ(map.Find(HashedKey(std::string_view{})), ids[0]);
  EXPECT_EQ(map.size(), keys.size());
}

TEST(CounterMap, HoldsTheWholeInt64Range) {
  CounterMap map;
  const EntryId low = InsertNew(map, "low");
  const EntryId high = InsertNew(map, std::string(40, 'h'));
  EXPECT_EQ(map.value(low), 0);  // inserted with value 0
  map.value(low) = INT64_MIN;
  map.value(high) = INT64_MAX;
  EXPECT_EQ(map.value(map.Find(HashedKey("low"))), INT64_MIN);
  EXPECT_EQ(map.value(map.Find(HashedKey(std::string(40, 'h')))), INT64_MAX);
}

TEST(CounterMap, EraseRemovesOnlyThatKey) {
  CounterMap map;
  const std::vector<std::string> keys = AssortedKeys();
  std::vector<EntryId> ids;
  for (const std::string& key : keys) {
    ids.push_back(InsertNew(map, key));
    map.value(ids.back()) = static_cast<int64_t>(key.size());
  }
  // Erase every other key, then check all of them.
  for (size_t i = 0; i < keys.size(); i += 2) map.Erase(ids[i]);
  EXPECT_EQ(map.size(), keys.size() / 2);
  for (size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE(i);
    if (i % 2 == 0) {
      EXPECT_EQ(map.Find(HashedKey(keys[i])), CounterMap::kNoEntry);
      EXPECT_FALSE(map.IsLive(ids[i]));
    } else {
      ASSERT_EQ(map.Find(HashedKey(keys[i])), ids[i]);
      EXPECT_TRUE(map.IsLive(ids[i]));
      EXPECT_EQ(map.key(ids[i]), keys[i]);
      EXPECT_EQ(map.value(ids[i]), static_cast<int64_t>(keys[i].size()));
    }
  }
  // Erased keys come back as new entries with value 0.
  for (size_t i = 0; i < keys.size(); i += 2) {
    const EntryId id = InsertNew(map, keys[i]);
    EXPECT_EQ(map.value(id), 0);
    EXPECT_EQ(map.key(id), keys[i]);
  }
  EXPECT_EQ(map.size(), keys.size());
}

// Random inserts, updates, erases and lookups against std::unordered_map. `universe` keys
// are drawn from; a small universe keeps the map at its initial 16 slots and nearly full, so
// that probe runs wrap around the end of the index and backward-shift deletion is exercised
// at every position; a larger one goes through many resizes.
void RunModelCheck(size_t universe, size_t operations, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> keys;
  for (size_t i = 0; i < universe; ++i) {
    // A third of the keys are long enough to live on the heap.
    std::string key = NumberedKey(i);
    if (i % 3 == 0) key += std::string(20, static_cast<char>('a' + i % 26));
    if (i % 7 == 0) key.push_back('\0');
    keys.push_back(std::move(key));
  }

  CounterMap map;
  std::unordered_map<std::string, int64_t> model;
  std::unordered_map<std::string, EntryId> id_of;  // must not change while a key is present
  auto check_everything = [&] {
    ASSERT_EQ(map.size(), model.size());
    for (const auto& [key, value] : model) {
      const EntryId id = map.Find(HashedKey(key));
      ASSERT_NE(id, CounterMap::kNoEntry) << key;
      ASSERT_EQ(id, id_of.at(key));
      ASSERT_EQ(map.value(id), value);
    }
    size_t live = 0;
    for (EntryId id = 0; id < map.entry_limit(); ++id) {
      if (!map.IsLive(id)) continue;
      ++live;
      const auto it = model.find(std::string(map.key(id)));
      ASSERT_NE(it, model.end());
      ASSERT_EQ(id_of.at(it->first), id);
    }
    ASSERT_EQ(live, model.size());
  };

  for (size_t op = 0; op < operations; ++op) {
    const std::string& key = keys[rng() % keys.size()];
    const HashedKey hashed(key);
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2: {  // increment, inserting when missing
        const auto delta = static_cast<int64_t>(rng() % 1000) - 500;
        bool inserted = false;
        const EntryId id = map.FindOrInsert(hashed, &inserted);
        ASSERT_EQ(inserted, !model.contains(key));
        if (inserted) {
          ASSERT_EQ(map.value(id), 0);
          id_of[key] = id;
        } else {
          ASSERT_EQ(id, id_of.at(key));
        }
        map.value(id) += delta;
        model[key] += delta;
        break;
      }
      case 3:
      case 4:
      case 5: {  // erase when present
        const EntryId id = map.Find(hashed);
        ASSERT_EQ(id != CounterMap::kNoEntry, model.contains(key)) << key;
        if (id != CounterMap::kNoEntry) {
          map.Erase(id);
          model.erase(key);
          id_of.erase(key);
          ASSERT_EQ(map.Find(hashed), CounterMap::kNoEntry);
        }
        break;
      }
      default: {  // lookup
        const EntryId id = map.Find(hashed);
        const auto it = model.find(key);
        ASSERT_EQ(id != CounterMap::kNoEntry, it != model.end()) << key;
        if (id != CounterMap::kNoEntry) {
          ASSERT_EQ(map.value(id), it->second);
        }
      }
    }
    ASSERT_EQ(map.size(), model.size());
    if (op % 4096 == 0 || universe <= 16) {
      check_everything();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  check_everything();
}

// Prefetching is a hint: on present, absent and erased keys (whose freed entries hold a null
// key pointer) it reads only what it may, and changes nothing a lookup sees.
TEST(CounterMap, PrefetchingChangesNothing) {
  CounterMap map;
  const std::vector<std::string> keys = AssortedKeys();
  std::vector<EntryId> ids;
  for (const std::string& key : keys) {
    ids.push_back(InsertNew(map, key));
    map.value(ids.back()) = static_cast<int64_t>(key.size()) + 7;
  }
  for (size_t i = 0; i < keys.size(); i += 3) map.Erase(ids[i]);
  std::vector<std::string> probes = keys;
  for (int i = 0; i < 100; ++i) probes.push_back("absent:" + std::to_string(i));
  for (const std::string& probe : probes) {
    const uint64_t hash = HashKey(probe);
    map.PrefetchSlot(hash);
    map.PrefetchEntry(hash);
    map.PrefetchHeapKey(hash);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE(i);
    if (i % 3 == 0) {
      EXPECT_EQ(map.Find(HashedKey(keys[i])), CounterMap::kNoEntry);
    } else {
      ASSERT_EQ(map.Find(HashedKey(keys[i])), ids[i]);
      EXPECT_EQ(map.key(ids[i]), keys[i]);
      EXPECT_EQ(map.value(ids[i]), static_cast<int64_t>(keys[i].size()) + 7);
    }
  }
  EXPECT_EQ(map.size(), keys.size() - (keys.size() + 2) / 3);
}

TEST(CounterMap, MatchesModelWithFewKeysInTheInitialIndex) {
  // At most 12 keys never grow the 16 slots (80% load), so every probe run is short and
  // many wrap around.
  RunModelCheck(12, 50'000, 1);
}

TEST(CounterMap, MatchesModelWithManyKeys) { RunModelCheck(20'000, 200'000, 42); }

TEST(CounterMap, MatchesModelThroughGrowAndShrink) {
  // Fill, empty almost completely, and fill again, so that erasures happen in a sparse index
  // and the free list is reused across growth.
  std::mt19937_64 rng(7);
  CounterMap map;
  std::unordered_map<std::string, EntryId> present;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < 30'000; ++i) {
      const std::string key = NumberedKey(rng() % 1'000'000);
      bool inserted = false;
      const EntryId id = map.FindOrInsert(HashedKey(key), &inserted);
      ASSERT_EQ(inserted, !present.contains(key));
      if (!inserted) {
        ASSERT_EQ(id, present.at(key));
      }
      present[key] = id;
      map.value(id) = static_cast<int64_t>(id);
    }
    std::vector<std::string> victims;
    for (const auto& [key, id] : present) {
      if (rng() % 10 != 0) victims.push_back(key);
    }
    for (const std::string& key : victims) {
      const EntryId id = map.Find(HashedKey(key));
      ASSERT_EQ(id, present.at(key));
      map.Erase(id);
      present.erase(key);
    }
    ASSERT_EQ(map.size(), present.size());
    for (const auto& [key, id] : present) {
      ASSERT_EQ(map.Find(HashedKey(key)), id) << key;
      ASSERT_EQ(map.value(id), static_cast<int64_t>(id));
    }
  }
}

TEST(CounterMap, EntryIdsAreStableAcrossGrowth) {
  CounterMap map;
  constexpr size_t kKeys = 100'000;
  std::vector<EntryId> ids;
  ids.reserve(kKeys);
  for (size_t i = 0; i < kKeys; ++i) {
    const std::string key = NumberedKey(i) + (i % 2 ? std::string(20, 'L') : "");
    ids.push_back(InsertNew(map, key));
    map.value(ids.back()) = static_cast<int64_t>(i);
  }
  // No erasures: every entry number was handed out once, below entry_limit.
  EXPECT_EQ(map.entry_limit(), kKeys);
  std::unordered_set<EntryId> distinct(ids.begin(), ids.end());
  EXPECT_EQ(distinct.size(), kKeys);
  for (size_t i = 0; i < kKeys; ++i) {
    const std::string key = NumberedKey(i) + (i % 2 ? std::string(20, 'L') : "");
    ASSERT_EQ(map.Find(HashedKey(key)), ids[i]) << key;
    ASSERT_LT(ids[i], map.entry_limit());
    ASSERT_EQ(map.key(ids[i]), key);
    ASSERT_EQ(map.value(ids[i]), static_cast<int64_t>(i));
  }
}

TEST(CounterMap, FreedEntriesAreReusedBelowTheLimit) {
  CounterMap map;
  std::vector<EntryId> ids;
  for (size_t i = 0; i < 1000; ++i) ids.push_back(InsertNew(map, NumberedKey(i)));
  const EntryId limit = map.entry_limit();
  std::unordered_set<EntryId> freed;
  for (size_t i = 0; i < 1000; i += 3) {
    map.Erase(ids[i]);
    freed.insert(ids[i]);
  }
  for (EntryId id : freed) EXPECT_FALSE(map.IsLive(id));
  // As many new keys as were erased fit in the freed entries.
  for (size_t i = 0; i < freed.size(); ++i) {
    const EntryId id =
        InsertNew(map, "new:" + std::to_string(i) + std::string(i % 2 ? 30 : 0, 'n'));
    EXPECT_TRUE(freed.contains(id)) << id;
    EXPECT_TRUE(map.IsLive(id));
  }
  EXPECT_EQ(map.entry_limit(), limit);
  EXPECT_FALSE(map.IsLive(limit));
  EXPECT_FALSE(map.IsLive(limit + 1000));
  // The next one goes past it.
  const EntryId next = InsertNew(map, "one more");
  EXPECT_EQ(next, limit);
  EXPECT_EQ(map.entry_limit(), limit + 1);
}

TEST(CounterMap, FlagsLeaveKeysIntactAndAreResetOnReuse) {
  CounterMap map;
  const std::string inline_key(15, 'i');  // length 15 = every length bit set
  const std::string heap_key(16, 'h');
  const EntryId a = InsertNew(map, inline_key);
  const EntryId b = InsertNew(map, heap_key);
  const EntryId c = InsertNew(map, "");
  const uint8_t flags[] = {CounterMap::kDirty, CounterMap::kHasExpiry,
                           CounterMap::kCheckpointDirty};
  for (EntryId id : {a, b, c}) {
    for (uint8_t flag : flags) {
      EXPECT_FALSE(map.HasFlag(id, flag));
      map.SetFlag(id, flag);
      EXPECT_TRUE(map.HasFlag(id, flag));
    }
    EXPECT_TRUE(map.IsLive(id));
  }
  EXPECT_EQ(map.key(a), inline_key);
  EXPECT_EQ(map.key(b), heap_key);
  EXPECT_EQ(map.key(c), "");
  EXPECT_EQ(map.Find(HashedKey(inline_key)), a);
  EXPECT_EQ(map.Find(HashedKey(heap_key)), b);
  EXPECT_EQ(map.Find(HashedKey("")), c);

  map.ClearFlag(a, CounterMap::kDirty);
  EXPECT_FALSE(map.HasFlag(a, CounterMap::kDirty));
  EXPECT_TRUE(map.HasFlag(a, CounterMap::kHasExpiry));
  EXPECT_EQ(map.key(a), inline_key);

  map.Erase(b);
  const EntryId reused = InsertNew(map, "fresh");
  EXPECT_EQ(reused, b);
  EXPECT_EQ(map.value(reused), 0);
  for (uint8_t flag : flags) EXPECT_FALSE(map.HasFlag(reused, flag));
  EXPECT_EQ(map.key(reused), "fresh");
}

TEST(CounterMap, ClearEmptiesAndStartsOver) {
  CounterMap map;
  const size_t empty_bytes = map.MemoryBytes();
  for (size_t i = 0; i < 10'000; ++i) InsertNew(map, NumberedKey(i) + std::string(30, 'c'));
  map.Clear();
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.entry_limit(), 0u);
  EXPECT_EQ(map.MemoryBytes(), empty_bytes);
  EXPECT_EQ(map.Find(HashedKey(NumberedKey(5) + std::string(30, 'c'))), CounterMap::kNoEntry);
  const EntryId id = InsertNew(map, NumberedKey(5));
  EXPECT_EQ(id, 0u);
  EXPECT_EQ(map.Find(HashedKey(NumberedKey(5))), id);
}

TEST(CounterMap, MemoryBytesGrowsSensibly) {
  CounterMap map;
  const size_t empty_bytes = map.MemoryBytes();
  EXPECT_LT(empty_bytes, 1024u);  // no chunk before the first key

  constexpr size_t kKeys = 100'000;
  for (size_t i = 0; i < kKeys; ++i) InsertNew(map, NumberedKey(i));  // inline keys
  const size_t full_bytes = map.MemoryBytes();
  // 24 bytes an entry plus at least 4 / 0.8 bytes of index per key; at most one spare chunk
  // of entries and an index less than half full after a doubling.
  EXPECT_GE(full_bytes, kKeys * (24 + 5));
  EXPECT_LE(full_bytes, (kKeys + 4096) * 24 + kKeys * 4 * 5 / 2 + empty_bytes);

  // Heap keys add their bytes; erasing them gives those bytes back.
  std::vector<EntryId> long_ids;
  for (size_t i = 0; i < 1000; ++i)
    long_ids.push_back(InsertNew(map, std::string(1000, 'L') + NumberedKey(i)));
  const size_t with_long = map.MemoryBytes();
  EXPECT_GE(with_long - full_bytes, 1000u * 1000);
  EXPECT_LE(with_long - full_bytes, 1000u * 1000 + 2 * 4096 * 24 + kKeys * 8);
  for (EntryId id : long_ids) map.Erase(id);
  EXPECT_LE(map.MemoryBytes(), with_long - size_t{1000} * 1000);
  EXPECT_GE(map.MemoryBytes(), full_bytes);
}

}  // namespace
}  // namespace tally::engine
