#include "engine/databases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "engine/keyspace.h"

namespace tally::engine {
namespace {

using namespace std::string_literals;

// "k<i>" (appended, not Name("k", i), which GCC 12 warns about wrongly).
std::string Name(std::string_view base, int i) {
  std::string name(base);
  name += std::to_string(i);
  return name;
}

TEST(DatabasesTest, DatabaseZeroKeepsTheKeyAsItIs) {
  EXPECT_EQ(StoredKey(0, "likes:7"), "likes:7");
  EXPECT_EQ(StoredKey(0, ""), "");
  EXPECT_EQ(StoredKey(0, "\0id:x"s), "\0id:x"s);  // tally's own records stay where they were
  EXPECT_EQ(DatabaseOf("likes:7"), 0u);
  EXPECT_EQ(DatabaseOf("\0id:x"s), 0u);
  EXPECT_EQ(DatabaseOf("\0pos:pg"s), 0u);
}

TEST(DatabasesTest, OtherDatabasesArePrefixed) {
  EXPECT_EQ(StoredKey(2, "likes:7"), "\0db\x02likes:7"s);
  EXPECT_EQ(StoredKey(15, ""), "\0db\x0f"s);
  EXPECT_EQ(StoredKey(255, "k"), "\0db\xffk"s);
  EXPECT_EQ(DatabaseOf(StoredKey(3, "x")), 3u);
  EXPECT_EQ(DatabaseOf(StoredKey(255, "x")), 255u);
}

TEST(DatabasesTest, SplitIsTheInverseOfStore) {
  const std::vector<std::string> names = {
      "", "a", "likes:7", "\0id:x"s, "\0db\x02y"s, std::string(40, 'k'), "\xff\xfe"};
  for (uint32_t db : {0u, 1u, 2u, 15u, 200u, 255u}) {
    for (const std::string& name : names) {
      if (db == 0 && IsReservedKey(name)) continue;
      const std::string stored = StoredKey(db, name);
      const DatabaseKey split = SplitStoredKey(stored);
      EXPECT_EQ(split.db, db) << name;
      EXPECT_EQ(split.name, name);
    }
  }
}

TEST(DatabasesTest, NoTwoDatabasesShareAStoredKey) {
  // Every name a database accepts, over every database: all stored keys distinct.
  const std::vector<std::string> names = {"",           "x",          "\0"s,     "\0d"s, "\0db"s,
                                          "\0db\x01x"s, "\0db\x00x"s, "db\x01x", "\x01x"};
  std::set<std::string> seen;
  size_t stored = 0;
  for (uint32_t db = 0; db < kMaxDatabases; ++db) {
    for (const std::string& name : names) {
      if (db == 0 && IsReservedKey(name)) continue;
      seen.insert(StoredKey(db, name));
      ++stored;
    }
  }
  EXPECT_EQ(seen.size(), stored);
}

TEST(DatabasesTest, DatabaseZeroReservesThePrefixOnly) {
  EXPECT_TRUE(IsReservedKey("\0db"s));
  EXPECT_TRUE(IsReservedKey("\0db\x02x"s));
  EXPECT_TRUE(IsReservedKey("\0dbanything"s));
  EXPECT_FALSE(IsReservedKey("\0d"s));
  EXPECT_FALSE(IsReservedKey("\0id:x"s));
  EXPECT_FALSE(IsReservedKey("db2"));
  EXPECT_FALSE(IsReservedKey(""));
}

TEST(DatabasesTest, APrefixFollowsKeysOfItsOwnDatabaseOnly) {
  EXPECT_TRUE(PrefixFollows(StoredKey(0, ""), StoredKey(0, "likes:1")));
  EXPECT_TRUE(PrefixFollows(StoredKey(0, "likes:"), StoredKey(0, "likes:1")));
  EXPECT_TRUE(PrefixFollows(StoredKey(2, ""), StoredKey(2, "likes:1")));
  EXPECT_TRUE(PrefixFollows(StoredKey(2, "likes:"), StoredKey(2, "likes:1")));
  // Database 0's "" (every key of database 0) is a byte prefix of every stored key.
  EXPECT_FALSE(PrefixFollows(StoredKey(0, ""), StoredKey(2, "likes:1")));
  EXPECT_FALSE(PrefixFollows(StoredKey(2, ""), StoredKey(3, "likes:1")));
  EXPECT_FALSE(PrefixFollows(StoredKey(2, "likes:"), StoredKey(0, "likes:1")));
  EXPECT_FALSE(PrefixFollows(StoredKey(0, "likes:2"), StoredKey(0, "likes:1")));
}

class DatabaseKeyspaceTest : public ::testing::Test {
 protected:
  void Incr(uint32_t db, std::string_view name, int64_t delta = 1) {
    const std::string stored = StoredKey(db, name);
    const HashedKey key(stored);
    ASSERT_TRUE(keyspace_.Lock(key).IncrBy(key, delta));
  }
  std::optional<int64_t> Get(uint32_t db, std::string_view name) {
    const std::string stored = StoredKey(db, name);
    const HashedKey key(stored);
    return keyspace_.Lock(key).Get(key);
  }
  void Expire(uint32_t db, std::string_view name, int64_t deadline_ms) {
    const std::string stored = StoredKey(db, name);
    const HashedKey key(stored);
    keyspace_.Lock(key).Expire(key, deadline_ms, ExpireCondition::kAlways);
  }

  ManualClock clock_{1'700'000'000'000};
  Keyspace keyspace_{&clock_};
};

TEST_F(DatabaseKeyspaceTest, CountsPerDatabase) {
  for (int i = 0; i < 300; ++i) Incr(0, Name("a", i));
  for (int i = 0; i < 20; ++i) Incr(2, Name("a", i));
  Incr(15, "a0");
  Expire(2, "a0", clock_.NowMillis() + 10'000);
  Expire(0, "a1", clock_.NowMillis() + 10'000);
  Expire(0, "a2", clock_.NowMillis() + 10'000);
  EXPECT_EQ(keyspace_.size(), 321u);
  EXPECT_EQ(keyspace_.database_size(0), 300u);
  EXPECT_EQ(keyspace_.database_size(2), 20u);
  EXPECT_EQ(keyspace_.database_size(15), 1u);
  EXPECT_EQ(keyspace_.database_size(3), 0u);
  EXPECT_EQ(keyspace_.database_expiring(0), 2u);
  EXPECT_EQ(keyspace_.database_expiring(2), 1u);
  // The same name in three databases: three counters.
  EXPECT_EQ(Get(0, "a0"), 1);
  EXPECT_EQ(Get(2, "a0"), 1);
  EXPECT_EQ(Get(15, "a0"), 1);
  EXPECT_EQ(Get(3, "a0"), std::nullopt);
}

TEST_F(DatabaseKeyspaceTest, ExpiryAndReclaimKeepTheCountsRight) {
  Incr(4, "gone");
  Incr(4, "kept");
  Expire(4, "gone", clock_.NowMillis() + 1'000);
  EXPECT_EQ(keyspace_.database_expiring(4), 1u);
  clock_.Advance(2'000);
  EXPECT_EQ(Get(4, "gone"), std::nullopt);
  EXPECT_EQ(keyspace_.ReclaimExpired(100), 1u);
  EXPECT_EQ(keyspace_.database_size(4), 1u);
  EXPECT_EQ(keyspace_.database_expiring(4), 0u);
  EXPECT_EQ(keyspace_.database_size(0), 0u);
}

TEST_F(DatabaseKeyspaceTest, FlushDatabaseRemovesOneDatabaseOnly) {
  for (int i = 0; i < 50; ++i) {
    Incr(0, Name("k", i));
    Incr(1, Name("k", i));
    Incr(7, Name("k", i));
  }
  Expire(7, "k1", clock_.NowMillis() + 10'000);
  CommitBatch drained;
  keyspace_.Drain(&drained);
  {
    View all = keyspace_.LockAll();
    all.FlushDatabase(7);
  }
  EXPECT_EQ(keyspace_.database_size(7), 0u);
  EXPECT_EQ(keyspace_.database_expiring(7), 0u);
  EXPECT_EQ(keyspace_.database_size(0), 50u);
  EXPECT_EQ(keyspace_.database_size(1), 50u);
  EXPECT_EQ(Get(7, "k3"), std::nullopt);
  EXPECT_EQ(Get(1, "k3"), 1);
  EXPECT_EQ(Get(0, "k3"), 1);
  // One deletion per counter of database 7, and no clearing of the store.
  CommitBatch batch;
  ASSERT_TRUE(keyspace_.Drain(&batch));
  EXPECT_FALSE(batch.clear_all());
  EXPECT_EQ(batch.delete_count(), 50u);
  for (size_t i = 0; i < batch.delete_count(); ++i) {
    EXPECT_EQ(DatabaseOf(batch.delete_key(i)), 7u);
  }
  {
    View all = keyspace_.LockAll();
    all.FlushDatabase(0);
  }
  EXPECT_EQ(keyspace_.database_size(0), 0u);
  EXPECT_EQ(keyspace_.database_size(1), 50u);
}

TEST_F(DatabaseKeyspaceTest, FlushOfTheOnlyDatabaseClearsTheStoreAtOnce) {
  Incr(3, "a");
  Incr(3, "b");
  {
    View all = keyspace_.LockAll();
    all.FlushDatabase(3);
  }
  CommitBatch batch;
  ASSERT_TRUE(keyspace_.Drain(&batch));
  EXPECT_TRUE(batch.clear_all());
  EXPECT_EQ(keyspace_.size(), 0u);
  EXPECT_EQ(keyspace_.database_size(3), 0u);
}

TEST_F(DatabaseKeyspaceTest, LoadingCountsPerDatabase) {
  keyspace_.LoadPut(StoredKey(5, "x"), CounterRecord{3, clock_.NowMillis() + 5'000});
  keyspace_.LoadPut(StoredKey(5, "y"), CounterRecord{4, 0});
  keyspace_.LoadPut("z", CounterRecord{5, 0});
  keyspace_.LoadDelete(StoredKey(5, "y"));
  EXPECT_EQ(keyspace_.database_size(5), 1u);
  EXPECT_EQ(keyspace_.database_expiring(5), 1u);
  EXPECT_EQ(keyspace_.database_size(0), 1u);
  keyspace_.LoadClear();
  EXPECT_EQ(keyspace_.database_size(5), 0u);
  EXPECT_EQ(keyspace_.database_expiring(5), 0u);
}

}  // namespace
}  // namespace tally::engine
