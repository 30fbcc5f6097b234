// verify's pure parts: the comparison of two sides' groups, retention's cut, and the
// numbers it prints.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/definitions/test_util.h"
#include "engine/definitions/value.h"
#include "programs/verify/compare.h"
#include "programs/verify/progress.h"
#include "programs/verify/source_states.h"

namespace tally::verify {
namespace {

namespace defs = tally::definitions;

defs::GroupValue Int(int64_t v) { return {defs::AggregateValue::Integer(v)}; }
defs::GroupValue Dec(std::string text) { return {defs::AggregateValue::Decimal(std::move(text))}; }

TEST(Compare, ListsEveryDifferenceByKey) {
  const defs::CompiledCounter counter = defs::testing::MustCompile(
      "CREATE COUNTER c AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id");
  const Groups tally = {{"c:1", Int(5)}, {"c:2", Int(7)}, {"c:4", Int(1)}};
  const Groups source = {{"c:1", Int(5)}, {"c:2", Int(8)}, {"c:3", Int(-2)}};
  EXPECT_EQ(Compare(counter, tally, source), (std::vector<Difference>{
                                                 {"c:2", Int(7), Int(8)},  // different values
                                                 {"c:3", {}, Int(-2)},     // only at the source
                                                 {"c:4", Int(1), {}},      // only in tally
                                             }));
  EXPECT_TRUE(Compare(counter, tally, tally).empty());
  EXPECT_TRUE(Compare(counter, {}, {}).empty());
  EXPECT_EQ(ShownText(counter, {}), "0");
  EXPECT_EQ(ShownText(counter, Int(8)), "8");
}

// The aggregates beyond count: decimals by value, min, max, avg, NULLs and several
// aggregates, each difference reported; a missing group of a composite counter is "no
// group", never equal to anything.
TEST(Compare, ComparesEveryAggregateKindExactly) {
  defs::Catalog catalog = [](std::string_view name) -> const defs::SourceSchema* {
    static const defs::SourceSchema kOrders{"orders",
                                            {{"shop", defs::Type::kInt64},
                                             {"total", defs::Type::kNumeric, 12, 2},
                                             {"at", defs::Type::kTimestamp}}};
    return name == "orders" ? &kOrders : nullptr;
  };
  auto compile = [&](std::string_view sql) {
    auto compiled = defs::CompileSql(sql, catalog);
    EXPECT_TRUE(compiled) << compiled.error().message;
    return std::move(*compiled);
  };
  const auto revenue =
      compile("CREATE COUNTER revenue AS SELECT shop, sum(total) FROM orders GROUP BY shop");
  EXPECT_TRUE(
      Compare(revenue, {{"revenue:1", Dec("12.50")}}, {{"revenue:1", Dec("12.5")}}).empty());
  EXPECT_EQ(Compare(revenue, {{"revenue:1", Dec("12.50")}}, {{"revenue:1", Dec("12.51")}}).size(),
            1u);
  // A sum at 0 is no group: missing on one side is equal to 0.00 on the other.
  EXPECT_TRUE(Compare(revenue, {}, {{"revenue:1", Dec("0.00")}}).empty());
  EXPECT_EQ(ShownText(revenue, {}), "0.00");
  EXPECT_EQ(*RepairValue(revenue, Dec("-12.5")), -1250);
  EXPECT_EQ(*RepairValue(revenue, {}), 0);

  const auto all = compile(
      "CREATE COUNTER s AS SELECT shop, count(DISTINCT total) AS n, min(total) AS low, "
      "max(at) AS last, avg(total) AS mean FROM orders GROUP BY shop");
  auto group = [](int64_t n, std::string low, int64_t last, std::string mean) {
    return defs::GroupValue{
        defs::AggregateValue::Integer(n),
        low.empty() ? defs::AggregateValue::Null() : defs::AggregateValue::Decimal(low),
        defs::AggregateValue::Timestamp(last), defs::AggregateValue::Decimal(mean)};
  };
  const Groups mine = {{"s:1", group(2, "1.00", 100, "1.5000000000000000")}};
  EXPECT_TRUE(Compare(all, mine, {{"s:1", group(2, "1.0", 100, "1.50000000000000000")}}).empty());
  for (const defs::GroupValue& other :
       {group(3, "1.00", 100, "1.5000000000000000"), group(2, "", 100, "1.5000000000000000"),
        group(2, "1.00", 101, "1.5000000000000000"), group(2, "1.00", 100, "1.5000000000000001")}) {
    const std::vector<Difference> found = Compare(all, mine, {{"s:1", other}});
    ASSERT_EQ(found.size(), 1u) << defs::GroupText(other);
    EXPECT_EQ(found[0].source, other);
  }
  EXPECT_EQ(ShownText(all, mine.at("s:1")),
            "(2, 1.00, 19700101T000000.000100Z, 1.5000000000000000)");
  EXPECT_EQ(Compare(all, mine, {}).size(), 1u);
  EXPECT_EQ(ShownText(all, {}), "no group");

  // Each kind read as tallyd and PostgreSQL spell it.
  const auto& columns = all.aggregates();
  EXPECT_EQ(*ReadAggregate(columns[0], "7"), defs::AggregateValue::Integer(7));
  EXPECT_EQ(*ReadAggregate(columns[1], "-0.05"), defs::AggregateValue::Decimal("-0.05"));
  EXPECT_EQ(*ReadAggregate(columns[2], "2024-05-01 13:45:00+00"),
            *ReadAggregate(columns[2], "20240501T134500Z"));
  EXPECT_FALSE(ReadAggregate(columns[0], "7.5"));
  EXPECT_FALSE(ReadAggregate(columns[1], "NaN"));
  EXPECT_FALSE(ReadAggregate(columns[3], "1e5"));
  EXPECT_FALSE(ReadAggregate(columns[2], "tomorrow"));
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
  Groups groups = {{key(100 * kDay), Int(3)}, {key(99 * kDay), Int(2)}, {key(90 * kDay), Int(1)}};
  EXPECT_EQ(DropExpired(daily, now, groups), 1u);
  EXPECT_EQ(groups, (Groups{{key(100 * kDay), Int(3)}, {key(99 * kDay), Int(2)}}));

  const defs::CompiledCounter forever = defs::testing::MustCompile(
      "CREATE COUNTER forever AS SELECT blog_id, date_trunc('day', created_at) AS day, "
      "count(*) FROM posts GROUP BY blog_id, day");
  Groups kept = {{key(0), Int(1)}};
  EXPECT_EQ(DropExpired(forever, now, kept), 0u);
  EXPECT_EQ(kept.size(), 1u);
}

// The queries that read the records of a counter that keeps hidden records: built from the
// compiled counter's key columns, source, WHERE and arguments, grouped by position.
TEST(RecordQueries, ReadEveryRecordOfTheCountersGroups) {
  const defs::CompiledCounter all = defs::testing::MustCompile(
      "CREATE COUNTER a AS SELECT blog_id, date_trunc('day', created_at) AS day, count(*) AS n, "
      "sum(rating) AS total, count(title) AS titled, max(rating + 1) AS best, "
      "avg(rating) AS mean, count(DISTINCT user_id) AS authors FROM posts "
      "WHERE is_published AND NOT is_deleted GROUP BY blog_id, day");
  const std::vector<RecordQuery> queries = RecordQueries(all);
  ASSERT_EQ(queries.size(), 3u);
  EXPECT_EQ(queries[0].sql,
            "SELECT blog_id, date_trunc('day', created_at), count(*), sum(rating), count(rating), "
            "count(title), sum(rating), count(rating) FROM posts WHERE ((is_published AND (NOT "
            "is_deleted))) GROUP BY 1, 2");
  EXPECT_EQ(queries[0].values_of, -1);
  using Kind = defs::RecordKind;
  EXPECT_EQ(queries[0].columns, (std::vector<std::pair<uint32_t, Kind>>{{1, Kind::kSum},
                                                                        {1, Kind::kCount},
                                                                        {2, Kind::kCount},
                                                                        {4, Kind::kSum},
                                                                        {4, Kind::kCount}}));
  EXPECT_EQ(queries[1].sql,
            "SELECT blog_id, date_trunc('day', created_at), (rating + 1), count(*) FROM posts "
            "WHERE ((is_published AND (NOT is_deleted))) AND ((rating + 1)) IS NOT NULL GROUP BY "
            "1, 2, 3");
  EXPECT_EQ(queries[1].values_of, 3);
  EXPECT_EQ(queries[2].values_of, 5);

  // count(DISTINCT x) alone, without GROUP BY or WHERE: the values only.
  const std::vector<RecordQuery> distinct = RecordQueries(
      defs::testing::MustCompile("CREATE COUNTER d AS SELECT count(DISTINCT status) FROM posts"));
  ASSERT_EQ(distinct.size(), 1u);
  EXPECT_EQ(distinct[0].sql,
            "SELECT status, count(*) FROM posts WHERE (status) IS NOT NULL GROUP BY 1");
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
