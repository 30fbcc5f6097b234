// verify's pure parts: the comparison of two sides' groups, retention's cut, and the
// numbers it prints.
#include <gtest/gtest.h>

#include <vector>

#include "engine/definitions/test_util.h"
#include "engine/definitions/value.h"
#include "programs/verify/compare.h"
#include "programs/verify/progress.h"

namespace tally::verify {
namespace {

namespace defs = tally::definitions;

TEST(Compare, ListsEveryDifferenceByKey) {
  const Groups tally = {{"c:1", 5}, {"c:2", 7}, {"c:4", 1}};
  const Groups source = {{"c:1", 5}, {"c:2", 8}, {"c:3", -2}};
  EXPECT_EQ(Compare(tally, source), (std::vector<Difference>{
                                        {"c:2", 7, 8},   // both, different values
                                        {"c:3", 0, -2},  // only at the source
                                        {"c:4", 1, 0},   // only in tally
                                    }));
  EXPECT_TRUE(Compare(tally, tally).empty());
  EXPECT_TRUE(Compare({}, {}).empty());
}

TEST(DropExpired, CutsTheBucketsPastRetentionOnly) {
  constexpr int64_t kDay = 86'400'000'000;
  const defs::CompiledCounter daily = defs::testing::MustCompile(
      "CREATE COUNTER daily AS SELECT blog_id, date_trunc('day', created_at) AS day, count(*) "
      "FROM posts GROUP BY blog_id, day WITH (retention = '2 days')");
  auto key = [](int64_t day_start) {
    const defs::Value parts[] = {defs::Value::Int(1), defs::Value::Timestamp(day_start)};
    return defs::EncodeKey("daily", parts);
  };
  const int64_t now = 100 * kDay + kDay / 2;
  Groups groups = {{key(100 * kDay), 3}, {key(99 * kDay), 2}, {key(90 * kDay), 1}};
  EXPECT_EQ(DropExpired(daily, now, groups), 1u);
  EXPECT_EQ(groups, (Groups{{key(100 * kDay), 3}, {key(99 * kDay), 2}}));

  const defs::CompiledCounter forever = defs::testing::MustCompile(
      "CREATE COUNTER forever AS SELECT blog_id, date_trunc('day', created_at) AS day, "
      "count(*) FROM posts GROUP BY blog_id, day");
  Groups kept = {{key(0), 1}};
  EXPECT_EQ(DropExpired(forever, now, kept), 0u);
  EXPECT_EQ(kept.size(), 1u);
}

TEST(Thousands, SeparatesEveryThreeDigits) {
  EXPECT_EQ(Thousands(0), "0");
  EXPECT_EQ(Thousands(999), "999");
  EXPECT_EQ(Thousands(1000), "1,000");
  EXPECT_EQ(Thousands(1234567), "1,234,567");
  EXPECT_EQ(Thousands(UINT64_MAX), "18,446,744,073,709,551,615");
  EXPECT_EQ(Plural(1, "counter", "counters"), "1 counter");
  EXPECT_EQ(Plural(0, "counter", "counters"), "0 counters");
  EXPECT_EQ(Plural(1200, "group", "groups"), "1,200 groups");
}

}  // namespace
}  // namespace tally::verify
