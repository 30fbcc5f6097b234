#include "engine/write_sketch.h"

namespace tally::engine {

void WriteSketch::Replace(const HashedKey& key, uint64_t weight) {
  Slot* slot = nullptr;
  if (used_ < kSlots) {
    slot = &slots_[used_++];
    slot->count = 0;
  } else {
    slot = &slots_[0];
    for (Slot& candidate : slots_) {
      if (candidate.count < slot->count) slot = &candidate;
    }
  }
  slot->hash = key.hash;
  slot->error = slot->count;
  slot->count += weight;
  slot->key.assign(key.key);
}

void WriteSketch::Drain(std::vector<KeyWrites>* out) {
  for (size_t i = 0; i < used_; ++i) {
    const Slot& slot = slots_[i];
    if (slot.count > slot.error) out->push_back({slot.key, slot.count - slot.error});
  }
  used_ = 0;
}

}  // namespace tally::engine
