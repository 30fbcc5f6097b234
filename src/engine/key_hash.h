// The one hash of a counter key. Its bits are split between the stripe that owns the key,
// the position in the stripe's index, and a tag that spares most key comparisons.
#pragma once

#include <cstdint>
#include <string_view>

namespace tally::engine {

uint64_t HashKey(std::string_view key);

// A key together with its hash, computed once and passed down.
struct HashedKey {
  std::string_view key;
  uint64_t hash;

  explicit HashedKey(std::string_view k) : key(k), hash(HashKey(k)) {}
  HashedKey(std::string_view k, uint64_t h) : key(k), hash(h) {}
};

}  // namespace tally::engine
