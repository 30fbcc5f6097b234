// WriteSketch: the most-written keys of one keyspace stripe since the last drain, in a
// few fixed slots (the space-saving summary of Metwally, Agrawal and El Abbadi). The
// stripe feeds it under the stripe's lock, which the write holds anyway, so it needs no
// lock or atomic of its own; HotKeys drains every stripe's sketch about once a second.
//
// Guarantee: of a stream of total weight W, every key whose weight exceeds W / kSlots is
// held, and a held key's reported weight (count minus the count it inherited when it took
// its slot) never exceeds its true weight. Not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/key_hash.h"

namespace tally::engine {

// A key and how many writes it took.
struct KeyWrites {
  std::string key;
  uint64_t writes = 0;
};

class WriteSketch {
 public:
  static constexpr size_t kSlots = 8;

  // Counts `weight` writes of `key`. Copies the key's bytes only when it takes a slot.
  void Add(const HashedKey& key, uint64_t weight) {
    for (size_t i = 0; i < used_; ++i) {
      Slot& slot = slots_[i];
      if (slot.hash == key.hash && slot.key == key.key) {
        slot.count += weight;
        return;
      }
    }
    Replace(key, weight);
  }

  // Appends each held key with its guaranteed weight (when above zero), and empties the
  // sketch.
  void Drain(std::vector<KeyWrites>* out);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint64_t count = 0;
    uint64_t error = 0;  // the count the slot held when this key took it
    std::string key;     // its capacity is kept from key to key
  };
  // A new key: a free slot, else the slot of the smallest count.
  void Replace(const HashedKey& key, uint64_t weight);

  std::array<Slot, kSlots> slots_;
  size_t used_ = 0;
};

}  // namespace tally::engine
