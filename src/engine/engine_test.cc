#include <gtest/gtest.h>

#include "engine/keyspace.h"

namespace tally::engine {
namespace {

TEST(Keyspace, IncrementsAndReads) {
  ManualClock clock(1'000'000);
  Keyspace keyspace(&clock);
  const HashedKey key("likes:1");
  {
    View view = keyspace.Lock(key);
    EXPECT_EQ(view.Get(key), std::nullopt);
    EXPECT_EQ(*view.IncrBy(key, 5), 5);
    EXPECT_EQ(*view.IncrBy(key, -2), 3);
  }
  View view = keyspace.Lock(key);
  EXPECT_EQ(view.Get(key), 3);
}

}  // namespace
}  // namespace tally::engine
