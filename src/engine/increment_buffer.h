// IncrementBuffer: one worker thread's shard of every counter it increments.
//
// A worker adds the increments of one event-loop turn here instead of touching the shared
// keyspace for each; Publish() then folds them in, one stripe lock and one lookup per
// distinct key, in the order they were added. A hot counter taking increments from many
// connections on many workers thus costs each worker one lock per turn, not one per
// increment, and no cache line bounces between cores per increment.
//
// Each Add() returns a ticket; after Publish() the ticket's outcome is the counter's value
// right after that increment, as if the increments of the turn had run one after the other
// at the moment of the fold (which is when they become visible to everyone). Not
// thread-safe: one per worker.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/keyspace.h"

namespace tally::engine {

class IncrementBuffer {
 public:
  explicit IncrementBuffer(Keyspace* keyspace);

  // Queues key += delta. Returns the ticket for its outcome.
  uint32_t Add(const HashedKey& key, int64_t delta);

  bool empty() const { return deltas_.empty(); }
  size_t size() const { return deltas_.size(); }
  bool Contains(const HashedKey& key) const { return index_.contains(KeyRef{key.key, key.hash}); }

  // Folds every queued increment into the keyspace. Returns the commit epoch that must be
  // durable before any outcome may be revealed. Outcomes stay readable until Clear().
  uint64_t Publish();

  const IncrementOutcome& outcome(uint32_t ticket) const { return outcomes_[ticket]; }

  // Forgets the queued increments and their outcomes.
  void Clear();

 private:
  struct KeyRef {
    std::string_view key;
    uint64_t hash;
    bool operator==(const KeyRef& other) const { return key == other.key; }
  };
  struct KeyRefHash {
    size_t operator()(const KeyRef& ref) const { return ref.hash; }
  };
  struct PendingKey {
    KeyRef ref;
    uint32_t first_delta = 0;  // filled by Publish: where its deltas start in sorted order
    uint32_t delta_count = 0;
  };

  std::string_view CopyKey(std::string_view key);
  // Fills keys_by_stripe_ with the positions of keys_ in stripe order.
  void SortKeysByStripe();

  Keyspace* keyspace_;
  absl::flat_hash_map<KeyRef, uint32_t, KeyRefHash> index_;  // key -> position in keys_
  std::vector<PendingKey> keys_;
  uint32_t last_position_ = 0;              // keys_ position of the last Add
  std::vector<uint32_t> key_of_delta_;      // per ticket: its key's position in keys_
  std::vector<int64_t> deltas_;             // per ticket
  std::vector<IncrementOutcome> outcomes_;  // per ticket, after Publish
  // Scratch of Publish, kept to avoid allocating every turn.
  std::vector<int64_t> sorted_deltas_;
  std::vector<uint32_t> sorted_tickets_;
  std::vector<IncrementOutcome> sorted_outcomes_;
  std::vector<uint32_t> keys_by_stripe_;
  std::vector<HashedKey> window_;
  // Key bytes live here until Clear(): blocks never move, so views into them stay valid.
  std::vector<std::unique_ptr<char[]>> blocks_;
  size_t block_used_ = 0;
  size_t block_size_ = 0;
};

}  // namespace tally::engine
