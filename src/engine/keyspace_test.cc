// The keyspace's commands on one thread with a manual clock: increments, sets, deletes,
// expiry and its reclaiming. Drain, Scan and Load are in keyspace_drain_test.cc.
#include "engine/keyspace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/keyspace_test_fixture.h"

namespace tally::engine {
namespace {

// ---- IncrBy ------------------------------------------------------------------------------

TEST_F(KeyspaceTest, IncrByStartsFromZeroAndAdds) {
  EXPECT_EQ(Get("c"), std::nullopt);
  EXPECT_EQ(IncrBy("c", 5).value(), 5);
  EXPECT_EQ(IncrBy("c", -12).value(), -7);
  EXPECT_EQ(Get("c"), -7);
  // INCRBY 0 on a missing key creates it with 0, as in Redis.
  EXPECT_EQ(IncrBy("zero", 0).value(), 0);
  EXPECT_TRUE(Exists("zero"));
  EXPECT_EQ(Get("zero"), 0);
  EXPECT_EQ(keyspace_.size(), 2u);
}

TEST_F(KeyspaceTest, IncrByOverflowIsAnErrorThatChangesNothing) {
  ASSERT_TRUE(Set("max", INT64_MAX - 1).applied);
  EXPECT_EQ(IncrBy("max", 1).value(), INT64_MAX);
  const Result<int64_t> over = IncrBy("max", 1);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().code, ErrorCode::kOverflow);
  EXPECT_EQ(Get("max"), INT64_MAX);
  EXPECT_FALSE(IncrBy("max", INT64_MAX).has_value());
  EXPECT_EQ(Get("max"), INT64_MAX);

  ASSERT_TRUE(Set("min", INT64_MIN).applied);
  const Result<int64_t> under = IncrBy("min", -1);
  ASSERT_FALSE(under.has_value());
  EXPECT_EQ(under.error().code, ErrorCode::kOverflow);
  EXPECT_EQ(Get("min"), INT64_MIN);
  EXPECT_EQ(IncrBy("min", INT64_MAX).value(), -1);
}

TEST_F(KeyspaceTest, IncrByKeepsTheDeadline) {
  ASSERT_TRUE(SetWithDeadline("k", 1, kStart + 5000).applied);
  EXPECT_EQ(IncrBy("k", 1).value(), 2);
  EXPECT_EQ(Deadline("k"), kStart + 5000);
}

TEST_F(KeyspaceTest, IncrBySequenceReportsEachIncrement) {
  const HashedKey key("seq");
  const std::vector<int64_t> deltas = {5, INT64_MAX, -3, INT64_MAX, INT64_MAX - 2, 1, -10};
  std::vector<IncrementOutcome> outcomes(deltas.size());
  keyspace_.Lock(key).IncrBySequence(key, deltas, outcomes);
  // 0+5=5; +MAX overflows; 5-3=2; +MAX overflows; 2+(MAX-2)=MAX; +1 overflows; MAX-10.
  const std::vector<std::pair<bool, int64_t>> expected = {{false, 5},
                                                          {true, 5},
                                                          {false, 2},
                                                          {true, 2},
                                                          {false, INT64_MAX},
                                                          {true, INT64_MAX},
                                                          {false, INT64_MAX - 10}};
  for (size_t i = 0; i < deltas.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(outcomes[i].overflow, expected[i].first);
    EXPECT_EQ(outcomes[i].value, expected[i].second);
  }
  EXPECT_EQ(Get("seq"), INT64_MAX - 10);
}

TEST_F(KeyspaceTest, IncrementsAppliedCountsEachIncrementButNoOverflow) {
  ASSERT_TRUE(Set("a", 1).applied);  // a SET is no increment
  EXPECT_EQ(IncrBy("a", 2).value(), 3);
  EXPECT_FALSE(IncrBy("a", INT64_MAX).has_value());
  const HashedKey key("seq");
  const std::vector<int64_t> deltas = {1, INT64_MAX, 1, 1};  // the second overflows
  std::vector<IncrementOutcome> outcomes(deltas.size());
  keyspace_.Lock(key).IncrBySequence(key, deltas, outcomes);
  ASSERT_TRUE(keyspace_.Lock(key).IncrByWithExpiry(key, 1, kStart + 1000, false).has_value());
  EXPECT_EQ(keyspace_.increments_applied(), 1u + 3u + 1u);
}

TEST_F(KeyspaceTest, IncrBySequenceOnAnExpiredKeyStartsFromZero) {
  ASSERT_TRUE(SetWithDeadline("e", 100, kStart + 10).applied);
  clock_.Advance(10);
  const HashedKey key("e");
  const std::vector<int64_t> deltas = {1, 2};
  std::vector<IncrementOutcome> outcomes(2);
  keyspace_.Lock(key).IncrBySequence(key, deltas, outcomes);
  EXPECT_EQ(outcomes[0].value, 1);
  EXPECT_EQ(outcomes[1].value, 3);
  EXPECT_EQ(Deadline("e"), -1);  // the new key has no expiry
}

TEST_F(KeyspaceTest, IncrByWithExpirySetsOrKeepsTheDeadline) {
  const HashedKey key("w");
  auto incr = [&](int64_t delta, int64_t deadline, bool only_if_no_expiry) {
    return keyspace_.Lock(key).IncrByWithExpiry(key, delta, deadline, only_if_no_expiry);
  };
  EXPECT_EQ(incr(3, kStart + 1000, true).value(), 3);
  EXPECT_EQ(Deadline("w"), kStart + 1000);
  EXPECT_EQ(incr(3, kStart + 9000, true).value(), 6);  // had one: kept
  EXPECT_EQ(Deadline("w"), kStart + 1000);
  EXPECT_EQ(incr(3, kStart + 9000, false).value(), 9);  // always: replaced
  EXPECT_EQ(Deadline("w"), kStart + 9000);
  ASSERT_TRUE(Set("w", INT64_MAX, SetOptions{.expiry = ExpiryAction::kKeep}).applied);
  const Result<int64_t> over = incr(1, kStart + 20000, false);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().code, ErrorCode::kOverflow);
  EXPECT_EQ(Get("w"), INT64_MAX);
  EXPECT_EQ(Deadline("w"), kStart + 9000);  // an overflow changes nothing, deadline included
  // An expired key starts over from 0 with the new deadline.
  clock_.Set(kStart + 9000);
  EXPECT_EQ(incr(4, kStart + 15000, true).value(), 4);
  EXPECT_EQ(Deadline("w"), kStart + 15000);
}

// ---- Set ---------------------------------------------------------------------------------

TEST_F(KeyspaceTest, SetReturnsThePreviousValue) {
  SetOutcome first = Set("s", 10);
  EXPECT_TRUE(first.applied);
  EXPECT_EQ(first.previous, std::nullopt);
  SetOutcome second = Set("s", -4);
  EXPECT_TRUE(second.applied);
  EXPECT_EQ(second.previous, 10);
  EXPECT_EQ(Get("s"), -4);
}

TEST_F(KeyspaceTest, SetNxAppliesOnlyToMissingKeys) {
  const SetOptions nx{.condition = SetCondition::kIfMissing};
  SetOutcome created = Set("nx", 1, nx);
  EXPECT_TRUE(created.applied);
  EXPECT_EQ(created.previous, std::nullopt);
  SetOutcome refused = Set("nx", 2, nx);
  EXPECT_FALSE(refused.applied);
  EXPECT_EQ(refused.previous, 1);
  EXPECT_EQ(Get("nx"), 1);
  // An expired key counts as missing.
  ASSERT_TRUE(SetWithDeadline("nx-exp", 5, kStart + 1).applied);
  clock_.Advance(1);
  EXPECT_TRUE(Set("nx-exp", 6, nx).applied);
  EXPECT_EQ(Get("nx-exp"), 6);
  EXPECT_EQ(Deadline("nx-exp"), -1);
}

TEST_F(KeyspaceTest, SetXxAppliesOnlyToExistingKeys) {
  const SetOptions xx{.condition = SetCondition::kIfExists};
  SetOutcome refused = Set("xx", 1, xx);
  EXPECT_FALSE(refused.applied);
  EXPECT_EQ(refused.previous, std::nullopt);
  EXPECT_FALSE(Exists("xx"));
  EXPECT_EQ(keyspace_.size(), 0u);  // nothing was inserted on the way
  ASSERT_TRUE(Set("xx", 1).applied);
  SetOutcome applied = Set("xx", 2, xx);
  EXPECT_TRUE(applied.applied);
  EXPECT_EQ(applied.previous, 1);
  EXPECT_EQ(Get("xx"), 2);
}

TEST_F(KeyspaceTest, SetClearsKeepsOrSetsTheDeadline) {
  ASSERT_TRUE(SetWithDeadline("t", 1, kStart + 5000).applied);
  EXPECT_EQ(Deadline("t"), kStart + 5000);
  EXPECT_EQ(keyspace_.expiring_count(), 1u);
  // KEEPTTL
  ASSERT_TRUE(Set("t", 2, SetOptions{.expiry = ExpiryAction::kKeep}).applied);
  EXPECT_EQ(Get("t"), 2);
  EXPECT_EQ(Deadline("t"), kStart + 5000);
  // A plain SET clears it.
  ASSERT_TRUE(Set("t", 3).applied);
  EXPECT_EQ(Deadline("t"), -1);
  EXPECT_EQ(Ttl("t"), -1);
  EXPECT_EQ(keyspace_.expiring_count(), 0u);
  // KEEPTTL on a key without expiry, and on a new key, leaves none.
  ASSERT_TRUE(Set("t", 4, SetOptions{.expiry = ExpiryAction::kKeep}).applied);
  EXPECT_EQ(Deadline("t"), -1);
  ASSERT_TRUE(Set("new", 4, SetOptions{.expiry = ExpiryAction::kKeep}).applied);
  EXPECT_EQ(Deadline("new"), -1);
  // NX with a deadline.
  ASSERT_TRUE(Set("nxpx", 9,
                  SetOptions{.condition = SetCondition::kIfMissing,
                             .expiry = ExpiryAction::kSetDeadline,
                             .deadline_ms = kStart + 700})
                  .applied);
  EXPECT_EQ(Ttl("nxpx"), 700);
}

TEST_F(KeyspaceTest, SetWithADeadlineNotInTheFutureDeletes) {
  ASSERT_TRUE(Set("old", 1).applied);
  Drain();
  SetOutcome past = SetWithDeadline("old", 2, kStart - 1);
  EXPECT_TRUE(past.applied);
  EXPECT_EQ(past.previous, 1);
  EXPECT_FALSE(Exists("old"));
  EXPECT_EQ(keyspace_.size(), 0u);
  Drained drained = Drain();
  EXPECT_TRUE(drained.closed);
  EXPECT_EQ(drained.deletes, std::vector<std::string>{"old"});
  EXPECT_TRUE(drained.puts.empty());

  // A deadline equal to now is already past, also for a missing key.
  EXPECT_TRUE(SetWithDeadline("now", 2, kStart).applied);
  EXPECT_FALSE(Exists("now"));
  EXPECT_EQ(keyspace_.size(), 0u);
  EXPECT_EQ(keyspace_.expiring_count(), 0u);
  EXPECT_TRUE(Drain().puts.empty());
}

// ---- Delete, Exists ----------------------------------------------------------------------

TEST_F(KeyspaceTest, DeleteAndExists) {
  EXPECT_FALSE(Exists("d"));
  EXPECT_FALSE(Delete("d"));
  ASSERT_TRUE(Set("d", 0).applied);
  EXPECT_TRUE(Exists("d"));
  EXPECT_TRUE(Delete("d"));
  EXPECT_FALSE(Exists("d"));
  EXPECT_EQ(Get("d"), std::nullopt);
  EXPECT_FALSE(Delete("d"));
  EXPECT_EQ(keyspace_.size(), 0u);
  // An expired key does not exist and cannot be deleted (DEL returns 0).
  ASSERT_TRUE(SetWithDeadline("gone", 1, kStart + 5).applied);
  EXPECT_TRUE(Exists("gone"));
  clock_.Advance(5);
  EXPECT_FALSE(Exists("gone"));
  EXPECT_FALSE(Delete("gone"));
  EXPECT_EQ(keyspace_.size(), 0u);  // but the touch removed it
  EXPECT_EQ(keyspace_.expiring_count(), 0u);
}

TEST_F(KeyspaceTest, EmptyAndBinaryKeys) {
  const std::string binary("a\0b", 3);
  const std::string other("a\0c", 3);
  EXPECT_EQ(IncrBy("", 1).value(), 1);
  EXPECT_EQ(IncrBy(binary, 2).value(), 2);
  EXPECT_EQ(IncrBy(other, 3).value(), 3);
  EXPECT_EQ(IncrBy("a", 4).value(), 4);
  EXPECT_EQ(Get(""), 1);
  EXPECT_EQ(Get(std::string_view{}), 1);
  EXPECT_EQ(Get(binary), 2);
  EXPECT_EQ(Get(other), 3);
  EXPECT_EQ(Get("a"), 4);
  Drained drained = Drain();
  ASSERT_EQ(drained.puts.size(), 4u);
  EXPECT_EQ(drained.puts.at("").value, 1);
  EXPECT_EQ(drained.puts.at(binary).value, 2);
  EXPECT_TRUE(Delete(std::string_view{}));
  EXPECT_EQ(Drain().deletes, std::vector<std::string>{""});
}

// ---- Expire, Persist, TTL ----------------------------------------------------------------

TEST_F(KeyspaceTest, ExpireOnAMissingKeyFails) {
  for (ExpireCondition c :
       {ExpireCondition::kAlways, ExpireCondition::kIfNoExpiry, ExpireCondition::kIfHasExpiry,
        ExpireCondition::kIfGreater, ExpireCondition::kIfLess}) {
    EXPECT_FALSE(Expire("missing", kStart + 100, c));
    EXPECT_FALSE(Expire("missing", kStart - 100, c));
  }
  EXPECT_EQ(keyspace_.size(), 0u);
}

TEST_F(KeyspaceTest, ExpireConditionsOnAKeyWithoutExpiry) {
  ASSERT_TRUE(Set("k", 1).applied);
  // A key without expiry counts as expiring never: XX and GT fail, LT holds.
  EXPECT_FALSE(Expire("k", kStart + 100, ExpireCondition::kIfHasExpiry));
  EXPECT_FALSE(Expire("k", kStart + 100, ExpireCondition::kIfGreater));
  EXPECT_EQ(Deadline("k"), -1);
  EXPECT_TRUE(Expire("k", kStart + 100, ExpireCondition::kIfLess));
  EXPECT_EQ(Deadline("k"), kStart + 100);
  ASSERT_TRUE(Persist("k"));
  EXPECT_TRUE(Expire("k", kStart + 200, ExpireCondition::kIfNoExpiry));
  EXPECT_EQ(Deadline("k"), kStart + 200);
  ASSERT_TRUE(Persist("k"));
  EXPECT_TRUE(Expire("k", kStart + 300, ExpireCondition::kAlways));
  EXPECT_EQ(Deadline("k"), kStart + 300);
  EXPECT_EQ(Get("k"), 1);  // EXPIRE keeps the value
}

TEST_F(KeyspaceTest, ExpireConditionsOnAKeyWithExpiry) {
  const int64_t d = kStart + 1000;
  ASSERT_TRUE(SetWithDeadline("k", 1, d).applied);
  EXPECT_FALSE(Expire("k", d + 5, ExpireCondition::kIfNoExpiry));
  EXPECT_EQ(Deadline("k"), d);
  EXPECT_FALSE(Expire("k", d, ExpireCondition::kIfGreater));  // equal is not greater
  EXPECT_FALSE(Expire("k", d - 1, ExpireCondition::kIfGreater));
  EXPECT_FALSE(Expire("k", d, ExpireCondition::kIfLess));  // equal is not less
  EXPECT_FALSE(Expire("k", d + 1, ExpireCondition::kIfLess));
  EXPECT_EQ(Deadline("k"), d);
  EXPECT_TRUE(Expire("k", d + 1, ExpireCondition::kIfGreater));
  EXPECT_EQ(Deadline("k"), d + 1);
  EXPECT_TRUE(Expire("k", d - 1, ExpireCondition::kIfLess));
  EXPECT_EQ(Deadline("k"), d - 1);
  EXPECT_TRUE(Expire("k", d + 50, ExpireCondition::kIfHasExpiry));
  EXPECT_EQ(Deadline("k"), d + 50);
  EXPECT_EQ(keyspace_.expiring_count(), 1u);
}

TEST_F(KeyspaceTest, ExpireInThePastDeletesWhenTheConditionHolds) {
  ASSERT_TRUE(SetWithDeadline("k", 1, kStart + 1000).applied);
  // GT with a past deadline does not hold: nothing happens.
  EXPECT_FALSE(Expire("k", kStart - 1, ExpireCondition::kIfGreater));
  EXPECT_TRUE(Exists("k"));
  Drain();
  EXPECT_TRUE(Expire("k", kStart, ExpireCondition::kIfLess));
  EXPECT_FALSE(Exists("k"));
  EXPECT_EQ(keyspace_.size(), 0u);
  EXPECT_EQ(keyspace_.expiring_count(), 0u);
  EXPECT_EQ(Drain().deletes, std::vector<std::string>{"k"});
}

TEST_F(KeyspaceTest, PersistRemovesTheDeadline) {
  EXPECT_FALSE(Persist("missing"));
  ASSERT_TRUE(Set("p", 7).applied);
  EXPECT_FALSE(Persist("p"));
  ASSERT_TRUE(Expire("p", kStart + 100));
  EXPECT_TRUE(Persist("p"));
  EXPECT_EQ(Ttl("p"), -1);
  EXPECT_EQ(keyspace_.expiring_count(), 0u);
  clock_.Advance(1000);
  EXPECT_EQ(Get("p"), 7);  // no longer expires
  EXPECT_EQ(keyspace_.ReclaimExpired(100), 0u);
  EXPECT_EQ(Get("p"), 7);
}

TEST_F(KeyspaceTest, TimeToLiveAndDeadline) {
  EXPECT_EQ(Ttl("missing"), -2);
  EXPECT_EQ(Deadline("missing"), -2);
  ASSERT_TRUE(Set("forever", 1).applied);
  EXPECT_EQ(Ttl("forever"), -1);
  EXPECT_EQ(Deadline("forever"), -1);
  ASSERT_TRUE(SetWithDeadline("soon", 1, kStart + 2500).applied);
  EXPECT_EQ(Ttl("soon"), 2500);
  EXPECT_EQ(Deadline("soon"), kStart + 2500);
  clock_.Advance(2499);
  EXPECT_EQ(Ttl("soon"), 1);
  EXPECT_EQ(Deadline("soon"), kStart + 2500);
  clock_.Advance(1);
  EXPECT_EQ(Ttl("soon"), -2);
  EXPECT_EQ(Deadline("soon"), -2);
}

// ---- Expiry ------------------------------------------------------------------------------

TEST_F(KeyspaceTest, ExpiredKeysAreInvisibleAtOnce) {
  ASSERT_TRUE(SetWithDeadline("e", 42, kStart + 100).applied);
  ASSERT_TRUE(Set("stay", 1).applied);
  clock_.Advance(99);
  EXPECT_EQ(Get("e"), 42);
  EXPECT_TRUE(Exists("e"));
  std::vector<std::string> keys = ScanAll();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"e", "stay"}));
  clock_.Advance(1);  // now == deadline: expired
  EXPECT_EQ(Get("e"), std::nullopt);
  EXPECT_FALSE(Exists("e"));
  EXPECT_EQ(ScanAll(), std::vector<std::string>{"stay"});
  EXPECT_EQ(keyspace_.size(), 2u);  // still held until reclaimed or touched
  // A write starts a new counter without the old deadline.
  EXPECT_EQ(IncrBy("e", 1).value(), 1);
  EXPECT_EQ(Ttl("e"), -1);
  EXPECT_EQ(keyspace_.size(), 2u);
  EXPECT_EQ(keyspace_.expiring_count(), 0u);
}

TEST_F(KeyspaceTest, ReclaimExpiredRemovesInDeadlineOrderWithinBudget) {
  // All in one stripe: ReclaimExpired walks stripes in order, and deadline order holds within
  // a stripe.
  const std::vector<std::string> keys = KeysInStripe(3, 10, "r:");
  // Deadlines in scrambled order: key i expires at kStart + 10 * order[i].
  const std::vector<int> order = {7, 2, 9, 0, 5, 3, 8, 1, 6, 4};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(
        SetWithDeadline(keys[i], static_cast<int64_t>(i), kStart + 10 + int64_t{10} * order[i])
            .applied);
  }
  ASSERT_TRUE(Set(KeysInStripe(3, 11, "r:").back(), 1).applied);  // never expires
  Drain();
  EXPECT_EQ(keyspace_.expiring_count(), 10u);

  EXPECT_EQ(keyspace_.ReclaimExpired(100), 0u);  // nothing due yet
  clock_.Advance(10 + 10 * 5);                   // deadlines of order 0..5 have passed
  EXPECT_EQ(keyspace_.ReclaimExpired(4), 4u);
  EXPECT_EQ(keyspace_.size(), 7u);
  EXPECT_EQ(keyspace_.expiring_count(), 6u);
  std::vector<std::string> expected;
  for (int o = 0; o < 4; ++o)
    expected.push_back(keys[std::find(order.begin(), order.end(), o) - order.begin()]);
  EXPECT_EQ(Drain().deletes, expected);

  EXPECT_EQ(keyspace_.ReclaimExpired(100), 2u);  // order 4 and 5; the rest are not due
  EXPECT_EQ(keyspace_.size(), 5u);
  expected.clear();
  for (int o = 4; o < 6; ++o)
    expected.push_back(keys[std::find(order.begin(), order.end(), o) - order.begin()]);
  EXPECT_EQ(Drain().deletes, expected);
  EXPECT_EQ(keyspace_.ReclaimExpired(100), 0u);

  clock_.Advance(1000);
  EXPECT_EQ(keyspace_.ReclaimExpired(100), 4u);
  EXPECT_EQ(keyspace_.size(), 1u);
  EXPECT_EQ(keyspace_.expiring_count(), 0u);
}

TEST_F(KeyspaceTest, ReclaimExpiredSkipsChangedDeadlines) {
  const std::vector<std::string> keys = KeysInStripe(9, 4, "c:");
  for (const std::string& key : keys) ASSERT_TRUE(SetWithDeadline(key, 1, kStart + 10).applied);
  ASSERT_TRUE(Expire(keys[0], kStart + 1000));  // extended
  ASSERT_TRUE(Persist(keys[1]));                // no longer expires
  ASSERT_TRUE(Set(keys[2], 5).applied);         // a plain SET clears the deadline
  ASSERT_TRUE(Delete(keys[3]));
  ASSERT_TRUE(Set(keys[3], 6).applied);  // deleted and recreated without expiry
  clock_.Advance(20);
  EXPECT_EQ(keyspace_.ReclaimExpired(100), 0u);
  for (const std::string& key : keys) EXPECT_TRUE(Exists(key)) << key;
  clock_.Advance(1000);
  EXPECT_EQ(keyspace_.ReclaimExpired(100), 1u);
  EXPECT_FALSE(Exists(keys[0]));
  EXPECT_EQ(keyspace_.size(), 3u);
}

TEST_F(KeyspaceTest, ReclaimExpiredIsBoundedAcrossStripes) {
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(SetWithDeadline("x:" + std::to_string(i), i, kStart + 1 + i % 50).applied);
  }
  int writes_seen = 0;
  keyspace_.set_on_write([&] { ++writes_seen; });
  clock_.Advance(100);
  EXPECT_EQ(keyspace_.ReclaimExpired(300), 300u);
  EXPECT_EQ(writes_seen, 1);  // the committer is told once per call
  EXPECT_EQ(keyspace_.size(), 700u);
  EXPECT_EQ(keyspace_.ReclaimExpired(0), 0u);
  EXPECT_EQ(writes_seen, 1);
  EXPECT_EQ(keyspace_.ReclaimExpired(690), 690u);
  EXPECT_EQ(keyspace_.ReclaimExpired(690), 10u);
  EXPECT_EQ(keyspace_.size(), 0u);
  EXPECT_EQ(keyspace_.expiring_count(), 0u);
  EXPECT_EQ(Drain().deletes.size(), 1000u);
}

TEST_F(KeyspaceTest, ResettingAnExpiryOverAndOverStaysBounded) {
  ASSERT_TRUE(Set("k", 1).applied);
  const size_t before = keyspace_.memory_bytes();
  for (int i = 0; i < 200'000; ++i) {
    ASSERT_TRUE(Expire("k", kStart + 1'000'000 + i));
    if (i % 1000 == 0) keyspace_.ReclaimExpired(10);  // compacts the stale queue entries
  }
  keyspace_.ReclaimExpired(10);
  EXPECT_EQ(Deadline("k"), kStart + 1'000'000 + 199'999);
  // The queue holds at most ~2x live deadlines + 1024 + 1000 stale entries between calls.
  EXPECT_LT(keyspace_.memory_bytes(), before + 200'000);
}

}  // namespace
}  // namespace tally::engine
