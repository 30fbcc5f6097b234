#include "engine/increment_buffer.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace tally::engine {
namespace {

class IncrementBufferTest : public ::testing::Test {
 protected:
  std::optional<int64_t> Get(std::string_view k) {
    const HashedKey key(k);
    return keyspace_.Lock(key).Get(key);
  }
  void Set(std::string_view k, int64_t value) {
    const HashedKey key(k);
    ASSERT_TRUE(keyspace_.Lock(key).Set(key, value, SetOptions{}).applied);
  }

  ManualClock clock_{1'700'000'000'000};
  Keyspace keyspace_{&clock_};
  IncrementBuffer buffer_{&keyspace_};
};

TEST_F(IncrementBufferTest, OutcomesAreRunningValuesInAddOrder) {
  Set("a", 100);
  const uint32_t t0 = buffer_.Add(HashedKey("a"), 1);
  const uint32_t t1 = buffer_.Add(HashedKey("b"), 10);
  const uint32_t t2 = buffer_.Add(HashedKey("a"), 2);
  const uint32_t t3 = buffer_.Add(HashedKey("a"), -5);
  const uint32_t t4 = buffer_.Add(HashedKey("b"), 1);
  EXPECT_EQ(t0, 0u);
  EXPECT_EQ(t4, 4u);
  EXPECT_EQ(buffer_.size(), 5u);
  EXPECT_FALSE(buffer_.empty());
  // Nothing is visible before the fold.
  EXPECT_EQ(Get("a"), 100);
  EXPECT_EQ(Get("b"), std::nullopt);

  EXPECT_EQ(buffer_.Publish(), keyspace_.open_epoch());
  EXPECT_EQ(buffer_.outcome(t0).value, 101);
  EXPECT_EQ(buffer_.outcome(t1).value, 10);
  EXPECT_EQ(buffer_.outcome(t2).value, 103);
  EXPECT_EQ(buffer_.outcome(t3).value, 98);
  EXPECT_EQ(buffer_.outcome(t4).value, 11);
  for (uint32_t t : {t0, t1, t2, t3, t4}) EXPECT_FALSE(buffer_.outcome(t).overflow);
  EXPECT_EQ(Get("a"), 98);
  EXPECT_EQ(Get("b"), 11);
}

TEST_F(IncrementBufferTest, AnOverflowingIncrementIsSkippedAndReported) {
  Set("big", INT64_MAX - 1);
  const uint32_t t0 = buffer_.Add(HashedKey("big"), 1);
  const uint32_t t1 = buffer_.Add(HashedKey("big"), 1);
  const uint32_t t2 = buffer_.Add(HashedKey("big"), -3);
  const uint32_t t3 = buffer_.Add(HashedKey("small"), INT64_MIN);
  const uint32_t t4 = buffer_.Add(HashedKey("small"), -1);
  buffer_.Publish();
  EXPECT_FALSE(buffer_.outcome(t0).overflow);
  EXPECT_EQ(buffer_.outcome(t0).value, INT64_MAX);
  EXPECT_TRUE(buffer_.outcome(t1).overflow);
  EXPECT_EQ(buffer_.outcome(t1).value, INT64_MAX);
  EXPECT_FALSE(buffer_.outcome(t2).overflow);
  EXPECT_EQ(buffer_.outcome(t2).value, INT64_MAX - 3);
  EXPECT_EQ(buffer_.outcome(t3).value, INT64_MIN);
  EXPECT_TRUE(buffer_.outcome(t4).overflow);
  EXPECT_EQ(buffer_.outcome(t4).value, INT64_MIN);
  EXPECT_EQ(Get("big"), INT64_MAX - 3);
  EXPECT_EQ(Get("small"), INT64_MIN);
}

TEST_F(IncrementBufferTest, ManyKeysAcrossStripes) {
  std::mt19937_64 rng(5);
  std::vector<std::string> keys;
  std::set<size_t> stripes;
  for (int i = 0; i < 1000; ++i) {
    keys.push_back("key:" + std::to_string(i) + (i % 4 == 0 ? std::string(25, 'x') : ""));
    stripes.insert(StripeOf(HashKey(keys.back())));
  }
  ASSERT_EQ(stripes.size(), kStripeCount);
  std::map<std::string, int64_t> running;
  std::vector<std::pair<uint32_t, int64_t>> expected;  // ticket, running value
  for (int i = 0; i < 20'000; ++i) {
    const std::string& key = keys[rng() % keys.size()];
    const auto delta = static_cast<int64_t>(rng() % 201) - 100;
    const uint32_t ticket = buffer_.Add(HashedKey(key), delta);
    running[key] += delta;
    expected.emplace_back(ticket, running[key]);
  }
  buffer_.Publish();
  for (const auto& [ticket, value] : expected) {
    ASSERT_FALSE(buffer_.outcome(ticket).overflow);
    ASSERT_EQ(buffer_.outcome(ticket).value, value) << ticket;
  }
  for (const auto& [key, value] : running) EXPECT_EQ(Get(key), value) << key;
  EXPECT_EQ(keyspace_.size(), running.size());
}

// A fold goes a window of keys at a time (several stripes locked at once, lookups
// prefetched). Keys that exist, keys that are new and keys expired in between, in one fold
// far larger than a window, all end right.
TEST_F(IncrementBufferTest, AFoldOfExistingNewAndExpiredKeys) {
  const auto key_of = [](int i) {  // 20 bytes, as redis-benchmark's: held on the heap
    const std::string digits = std::to_string(i);
    return "counter:" + std::string(12 - digits.size(), '0') + digits;
  };
  std::map<std::string, int64_t> expected;
  for (int i = 0; i < 300; ++i) {
    const std::string key = key_of(i);
    if (i % 3 == 0) {
      Set(key, 1000);
      expected[key] = 1000;
    } else if (i % 3 == 1) {
      const HashedKey hashed(key);
      auto view = keyspace_.Lock(hashed);
      ASSERT_TRUE(view.IncrByWithExpiry(hashed, 500, clock_.NowMillis() + 10, false).has_value());
    }
  }
  clock_.Advance(11);  // the i % 3 == 1 keys are now expired
  std::vector<std::pair<uint32_t, std::string>> tickets;
  for (int round = 0; round < 3; ++round) {
    for (int i = 299; i >= 0; --i) {
      const std::string key = key_of(i);
      tickets.emplace_back(buffer_.Add(HashedKey(key), i + 1), key);
      expected[key] += i + 1;
    }
  }
  buffer_.Publish();
  std::map<std::string, int64_t> last_outcome;
  for (const auto& [ticket, key] : tickets) last_outcome[key] = buffer_.outcome(ticket).value;
  for (const auto& [key, value] : expected) {
    EXPECT_EQ(last_outcome[key], value) << key;
    EXPECT_EQ(Get(key), value) << key;
  }
}

TEST_F(IncrementBufferTest, ContainsTheKeysAddedSinceClear) {
  const std::string binary("k\0x", 3);
  EXPECT_FALSE(buffer_.Contains(HashedKey("k")));
  buffer_.Add(HashedKey(binary), 1);
  EXPECT_TRUE(buffer_.Contains(HashedKey(binary)));
  EXPECT_FALSE(buffer_.Contains(HashedKey("k")));
  EXPECT_FALSE(buffer_.Contains(HashedKey(std::string("k\0y", 3))));
  buffer_.Publish();
  EXPECT_TRUE(buffer_.Contains(HashedKey(binary)));
  buffer_.Clear();
  EXPECT_FALSE(buffer_.Contains(HashedKey(binary)));
  EXPECT_TRUE(buffer_.empty());
  EXPECT_EQ(buffer_.size(), 0u);
}

TEST_F(IncrementBufferTest, KeysAreCopied) {
  std::string key = "mutable";
  buffer_.Add(HashedKey(key), 1);
  key = "changed";  // the buffer must hold its own copy
  buffer_.Add(HashedKey(std::string("mutable")), 2);
  buffer_.Publish();
  EXPECT_EQ(Get("mutable"), 3);
  EXPECT_EQ(Get("changed"), std::nullopt);
}

TEST_F(IncrementBufferTest, ClearAndReuse) {
  for (int turn = 1; turn <= 5; ++turn) {
    SCOPED_TRACE(turn);
    std::vector<uint32_t> tickets;
    for (int i = 0; i < 3000; ++i) {
      // Enough key bytes to span several 16 KiB blocks each turn.
      tickets.push_back(
          buffer_.Add(HashedKey("reuse:" + std::to_string(i % 1500) + std::string(20, 'r')), 1));
    }
    EXPECT_EQ(tickets.front(), 0u);  // tickets start over after Clear
    buffer_.Publish();
    EXPECT_EQ(buffer_.outcome(tickets[0]).value, 2 * (turn - 1) + 1);
    EXPECT_EQ(buffer_.outcome(tickets[1500]).value, 2 * turn);
    buffer_.Clear();
    EXPECT_TRUE(buffer_.empty());
  }
  EXPECT_EQ(Get("reuse:0" + std::string(20, 'r')), 10);
  EXPECT_EQ(Get("reuse:1499" + std::string(20, 'r')), 10);
  EXPECT_EQ(keyspace_.size(), 1500u);
}

TEST_F(IncrementBufferTest, KeysLargerThanABlock) {
  const std::string huge(40'000, 'H');
  const std::string huge2(17'000, 'J');
  for (int turn = 0; turn < 3; ++turn) {
    buffer_.Add(HashedKey("small1"), 1);
    buffer_.Add(HashedKey(huge), 2);
    buffer_.Add(HashedKey("small2"), 3);
    buffer_.Add(HashedKey(huge2), 4);
    buffer_.Add(HashedKey(huge), 5);
    buffer_.Add(HashedKey("small1"), 6);
    EXPECT_TRUE(buffer_.Contains(HashedKey(huge)));
    buffer_.Publish();
    buffer_.Clear();
  }
  EXPECT_EQ(Get("small1"), 21);
  EXPECT_EQ(Get(huge), 21);
  EXPECT_EQ(Get("small2"), 9);
  EXPECT_EQ(Get(huge2), 12);
}

TEST_F(IncrementBufferTest, EmptyKey) {
  const uint32_t t0 = buffer_.Add(HashedKey(""), 4);
  const uint32_t t1 = buffer_.Add(HashedKey(std::string_view{}), 5);
  EXPECT_TRUE(buffer_.Contains(HashedKey("")));
  buffer_.Publish();
  EXPECT_EQ(buffer_.outcome(t0).value, 4);
  EXPECT_EQ(buffer_.outcome(t1).value, 9);
  EXPECT_EQ(Get(""), 9);
  EXPECT_EQ(keyspace_.size(), 1u);
}

TEST_F(IncrementBufferTest, PublishOfNothing) {
  EXPECT_EQ(buffer_.Publish(), 0u);
  CommitBatch batch;
  EXPECT_FALSE(keyspace_.Drain(&batch));  // nothing written: the epoch stays open
  EXPECT_EQ(keyspace_.open_epoch(), 1u);
}

TEST_F(IncrementBufferTest, PublishedIncrementsAreCommittedAsOneValue) {
  for (int i = 0; i < 64; ++i) buffer_.Add(HashedKey("hot"), 1);
  EXPECT_EQ(buffer_.Publish(), 1u);
  buffer_.Clear();
  for (int i = 0; i < 64; ++i) buffer_.Add(HashedKey("hot"), 1);
  EXPECT_EQ(buffer_.Publish(), 1u);
  CommitBatch batch;
  ASSERT_TRUE(keyspace_.Drain(&batch));
  EXPECT_EQ(batch.epoch(), 1u);
  ASSERT_EQ(batch.put_count(), 1u);
  EXPECT_EQ(batch.put_key(0), "hot");
  EXPECT_EQ(batch.put_record(0).value, 128);
  buffer_.Clear();
  buffer_.Add(HashedKey("hot"), 1);
  EXPECT_EQ(buffer_.Publish(), 2u);  // the next epoch
}

TEST_F(IncrementBufferTest, PublishNotifiesTheCommitterPerStripe) {
  int writes = 0;
  keyspace_.set_on_write([&] { ++writes; });
  buffer_.Add(HashedKey("one"), 1);
  buffer_.Add(HashedKey("one"), 1);
  buffer_.Publish();
  EXPECT_GE(writes, 1);
}

}  // namespace
}  // namespace tally::engine
