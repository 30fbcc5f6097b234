// The fixture of the keyspace's single-threaded tests (keyspace_test.cc, keyspace_drain_test.cc):
// a Keyspace on a manual clock, with shorthands for one-key views and for what Drain produced.
// Test code only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/keyspace.h"

namespace tally::engine {

inline constexpr int64_t kStart = 1'700'000'000'000;  // the ManualClock's start, Unix ms

// What one Drain produced, in a form tests can compare.
struct Drained {
  bool closed = false;
  uint64_t epoch = 0;
  bool clear_all = false;
  std::vector<std::string> deletes;   // in batch order
  std::vector<std::string> put_keys;  // in batch order
  std::map<std::string, CounterRecord> puts;
};

class KeyspaceTest : public ::testing::Test {
 protected:
  std::optional<int64_t> Get(std::string_view k) {
    const HashedKey key(k);
    return keyspace_.Lock(key).Get(key);
  }
  Result<int64_t> IncrBy(std::string_view k, int64_t delta) {
    const HashedKey key(k);
    return keyspace_.Lock(key).IncrBy(key, delta);
  }
  SetOutcome Set(std::string_view k, int64_t value, SetOptions options = {}) {
    const HashedKey key(k);
    return keyspace_.Lock(key).Set(key, value, options);
  }
  SetOutcome SetWithDeadline(std::string_view k, int64_t value, int64_t deadline_ms) {
    return Set(k, value,
               SetOptions{.expiry = ExpiryAction::kSetDeadline, .deadline_ms = deadline_ms});
  }
  bool Delete(std::string_view k) {
    const HashedKey key(k);
    return keyspace_.Lock(key).Delete(key);
  }
  bool Exists(std::string_view k) {
    const HashedKey key(k);
    return keyspace_.Lock(key).Exists(key);
  }
  bool Expire(std::string_view k, int64_t deadline_ms,
              ExpireCondition condition = ExpireCondition::kAlways) {
    const HashedKey key(k);
    return keyspace_.Lock(key).Expire(key, deadline_ms, condition);
  }
  bool Persist(std::string_view k) {
    const HashedKey key(k);
    return keyspace_.Lock(key).Persist(key);
  }
  int64_t Ttl(std::string_view k) {
    const HashedKey key(k);
    return keyspace_.Lock(key).TimeToLiveMillis(key);
  }
  int64_t Deadline(std::string_view k) {
    const HashedKey key(k);
    return keyspace_.Lock(key).DeadlineMillis(key);
  }
  Drained Drain() {
    CommitBatch batch;
    Drained out;
    out.closed = keyspace_.Drain(&batch);
    out.epoch = batch.epoch();
    out.clear_all = batch.clear_all();
    for (size_t i = 0; i < batch.delete_count(); ++i) {
      out.deletes.emplace_back(batch.delete_key(i));
    }
    for (size_t i = 0; i < batch.put_count(); ++i) {
      out.put_keys.emplace_back(batch.put_key(i));
      out.puts[std::string(batch.put_key(i))] = batch.put_record(i);
    }
    return out;
  }
  // Every key a full SCAN returns, in order, `count` entries a step.
  std::vector<std::string> ScanAll(size_t count = 10) {
    std::vector<std::string> keys;
    uint64_t cursor = 0;
    do {
      cursor = keyspace_.Scan(cursor, count, nullptr, &keys);
    } while (cursor != 0);
    return keys;
  }

  ManualClock clock_{kStart};
  Keyspace keyspace_{&clock_};
};

// The first `n` keys `prefix`0, `prefix`1, ... that fall in stripe `stripe`.
inline std::vector<std::string> KeysInStripe(size_t stripe, size_t n, const std::string& prefix) {
  std::vector<std::string> keys;
  for (size_t i = 0; keys.size() < n; ++i) {
    std::string key = prefix + std::to_string(i);
    if (StripeOf(HashKey(key)) == stripe) keys.push_back(std::move(key));
  }
  return keys;
}

}  // namespace tally::engine
