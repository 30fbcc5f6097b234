// The aggregates beyond count and sum, kept by DerivedCounters over a real RocksDbStore:
// exact numeric sums, count(DISTINCT x), min/max falling back when their value goes, avg,
// several aggregates in one counter; their hidden records across restarts, drops and
// truncates; a property test of 100,000 random changes against a recount; range reads; and
// repairs setting whole groups (RepairStates) that the formula then keeps exact.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "core/timestamp.h"
#include "engine/definitions/numeric.h"
#include "engine/derived/derived_test_util.h"

namespace tally::derived {
namespace {

namespace defs = tally::definitions;

constexpr std::string_view kShop = R"sql(
  CREATE SOURCE orders (id bigint, shop bigint, customer bigint, total numeric(12,2),
                        rating integer, at timestamptz);
  CREATE COUNTER revenue AS SELECT shop, sum(total) FROM orders GROUP BY shop;
  CREATE COUNTER buyers AS SELECT shop, count(DISTINCT customer) FROM orders GROUP BY shop;
  CREATE COUNTER best AS SELECT shop, max(rating) FROM orders GROUP BY shop;
  CREATE COUNTER cheapest AS SELECT shop, min(total) FROM orders GROUP BY shop;
  CREATE COUNTER mean AS SELECT shop, avg(total) FROM orders GROUP BY shop;
  CREATE COUNTER shop_all AS
    SELECT shop, count(*) AS orders, count(rating) AS rated, sum(total) AS revenue,
           min(rating) AS worst, max(at) AS latest, avg(rating) AS mean_rating,
           count(DISTINCT customer) AS buyers
    FROM orders GROUP BY shop;
)sql";

// One order row; std::nullopt is NULL.
struct Order {
  int64_t id = 0;
  int64_t shop = 0;
  std::optional<int64_t> customer;
  std::optional<int64_t> total;  // cents
  std::optional<int64_t> rating;
  std::optional<int64_t> at;  // micros
};

template <typename T, typename F>
std::string Or(const std::optional<T>& value, F&& spell) {
  return value ? spell(*value) : std::string("null");
}

std::string Json(const Order& o) {
  return fmt::format(R"({{"id":{},"shop":{},"customer":{},"total":{},"rating":{},"at":{}}})", o.id,
                     o.shop, Or(o.customer, [](int64_t v) { return std::to_string(v); }),
                     Or(o.total, [](int64_t v) { return "\"" + defs::FormatDecimal(v, 2) + "\""; }),
                     Or(o.rating, [](int64_t v) { return std::to_string(v); }),
                     Or(o.at, [](int64_t v) { return "\"" + FormatTimestamp(v) + "\""; }));
}

std::string Insert(const Order& o) { return R"({"source":"orders","new":)" + Json(o) + "}"; }
std::string Update(const Order& before, const Order& after) {
  return R"({"source":"orders","old":)" + Json(before) + ",\"new\":" + Json(after) + "}";
}
std::string Delete(const Order& o) { return R"({"source":"orders","old":)" + Json(o) + "}"; }
std::string Batch(const std::vector<std::string>& changes) {
  std::string body = "[";
  for (size_t i = 0; i < changes.size(); ++i) body += (i > 0 ? "," : "") + changes[i];
  return body + "]";
}

// What PostgreSQL would answer for one shop, spelled as GroupText spells a group.
struct Recount {
  int64_t rows = 0;
  int64_t rated = 0;
  int64_t rating_sum = 0;
  int64_t totals = 0;  // non-NULL totals
  int64_t total_sum = 0;
  std::multiset<int64_t> ratings;
  std::multiset<int64_t> total_values;
  std::multiset<int64_t> ats;
  std::map<int64_t, int64_t> customers;  // customer -> rows

  void Add(const Order& o, int sign) {
    rows += sign;
    if (o.rating) {
      rated += sign;
      rating_sum += sign * *o.rating;
      Move(ratings, *o.rating, sign);
    }
    if (o.total) {
      totals += sign;
      total_sum += sign * *o.total;
      Move(total_values, *o.total, sign);
    }
    if (o.at) Move(ats, *o.at, sign);
    if (o.customer && (customers[*o.customer] += sign) == 0) customers.erase(*o.customer);
  }
  static void Move(std::multiset<int64_t>& set, int64_t value, int sign) {
    if (sign > 0) {
      set.insert(value);
    } else {
      set.erase(set.find(value));
    }
  }
  std::string Revenue() const { return defs::FormatDecimal(total_sum, 2); }
  std::string Buyers() const { return std::to_string(customers.size()); }
  std::string Best() const { return ratings.empty() ? "NULL" : std::to_string(*ratings.rbegin()); }
  std::string Cheapest() const {
    return total_values.empty() ? "NULL" : defs::FormatDecimal(*total_values.begin(), 2);
  }
  std::string Mean() const { return totals == 0 ? "NULL" : defs::AvgText(total_sum, 2, totals); }
  std::string All() const {
    return fmt::format("({}, {}, {}, {}, {}, {}, {})", rows, rated,
                       totals == 0 ? "NULL" : Revenue(),
                       ratings.empty() ? "NULL" : std::to_string(*ratings.begin()),
                       ats.empty() ? "NULL" : FormatTimestamp(*ats.rbegin()),
                       rated == 0 ? "NULL" : defs::AvgText(rating_sum, 0, rated), Buyers());
  }
};

// The first minute of PushRandomChanges' orders: 2024-05-01T00:00:00Z.
constexpr int64_t kRandomStart = 1'714'521'600'000'000;

class AggregatesTest : public DerivedStoreTest {
 public:
  AggregatesTest() : DerivedStoreTest("tally_aggregates_test_", 1'700'000'000'000, {}) {}

  void SetUp() override {
    DerivedStoreTest::SetUp();
    if (!HasFatalFailure()) Define(kShop);
  }

  void Push(const std::vector<std::string>& changes) {
    auto outcome = derived_->Push(Batch(changes), "", decoder_);
    ASSERT_TRUE(outcome) << outcome.error().message;
    engine_->committer().WaitDurable(outcome->required_epoch);
  }

  using DerivedStoreTest::Restart;

 protected:
  // The value of `counter`'s group `shop` as GroupText spells it.
  std::string Shown(std::string_view counter, int64_t shop) {
    const std::string part = std::to_string(shop);
    const std::string_view parts[] = {part};
    auto key = derived_->KeyOf(counter, parts);
    EXPECT_TRUE(key) << key.error().message;
    auto page = derived_->Read(counter, {&*key, 1});
    EXPECT_TRUE(page) << page.error().message;
    return defs::GroupText(page->items.front().shown);
  }

  // The live groups of `counter`, by key.
  std::set<std::string> Groups(std::string_view counter) {
    auto prefix = derived_->PrefixOf(counter, {});
    EXPECT_TRUE(prefix);
    auto page = derived_->List(counter, *prefix, "", 1'000'000);
    EXPECT_TRUE(page) << page.error().message;
    std::set<std::string> keys;
    for (const KeyValue& item : page->items) keys.insert(item.key);
    return keys;
  }

  // The hidden records in the keyspace, of groups starting with `group_prefix`.
  size_t HiddenRecords(std::string_view group_prefix = {}) {
    std::vector<std::string> keys;
    uint64_t cursor = 0;
    do {
      cursor = engine_->keyspace().Scan(cursor, 1024, nullptr, &keys);
    } while (cursor != 0);
    return static_cast<size_t>(std::ranges::count_if(keys, [&](const std::string& key) {
      const std::optional<RecordName> record = ParseRecordKey(key);
      return record && record->group.starts_with(group_prefix);
    }));
  }
};

Order MakeOrder(int64_t id, int64_t shop, std::optional<int64_t> customer,
                std::optional<int64_t> total, std::optional<int64_t> rating,
                std::optional<int64_t> at = std::nullopt) {
  return Order{id, shop, customer, total, rating, at};
}

TEST_F(AggregatesTest, NumericSumsAreExactInTheColumnsScale) {
  const Order a = MakeOrder(1, 7, 1, 1250, 5);
  const Order b = MakeOrder(2, 7, 2, 5, 3);
  Push({Insert(a), Insert(b)});
  EXPECT_EQ(Shown("revenue", 7), "12.55");
  // A JSON number is read exactly too.
  Push({R"({"source":"orders","new":{"id":3,"shop":7,"customer":null,"total":0.1,)"
        R"("rating":null,"at":null}})"});
  EXPECT_EQ(Shown("revenue", 7), "12.65");
  Push({Update(a, MakeOrder(1, 7, 1, 100000000, 5)), Delete(b)});
  EXPECT_EQ(Shown("revenue", 7), "1000000.10");
  // More digits after the point than the column keeps are refused, the batch whole.
  auto refused = derived_->Push(R"({"source":"orders","new":{"id":4,"shop":7,"customer":1,)"
                                R"("total":"1.005","rating":5,"at":null}})",
                                "", decoder_);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "change 1: \"new\".\"total\" must be a decimal with at most 2 digits after the point "
            "(counter cheapest reads it), got \"1.005\" (has more than 2 digits after the point)");
}

TEST_F(AggregatesTest, SumOverAFloatIsRefusedAsNotExact) {
  auto refused = derived_->Execute(
      "CREATE SOURCE m (id bigint, w double precision);"
      "CREATE COUNTER weight AS SELECT sum(w) FROM m");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("sum over a float is not exact"), std::string::npos)
      << refused.error().message;
}

TEST_F(AggregatesTest, DistinctCountsMoveWhenAValuesRowsGoFromOrToZero) {
  const Order a = MakeOrder(1, 7, 100, 1, 1);
  const Order b = MakeOrder(2, 7, 100, 1, 1);
  const Order c = MakeOrder(3, 7, 200, 1, 1);
  const Order d = MakeOrder(4, 7, std::nullopt, 1, 1);
  Push({Insert(a), Insert(b), Insert(c), Insert(d)});
  EXPECT_EQ(Shown("buyers", 7), "2");
  Push({Delete(a)});  // customer 100 still has a row
  EXPECT_EQ(Shown("buyers", 7), "2");
  Push({Update(b, MakeOrder(2, 8, 100, 1, 1))});  // 100 moves to shop 8
  EXPECT_EQ(Shown("buyers", 7), "1");
  EXPECT_EQ(Shown("buyers", 8), "1");
  Push({Delete(c), Delete(d)});
  EXPECT_EQ(Groups("buyers"), std::set<std::string>{"buyers:8"});
}

TEST_F(AggregatesTest, MaxFallsBackToTheNextValueAndSurvivesARestart) {
  const Order a = MakeOrder(1, 7, 1, 100, 5);
  const Order b = MakeOrder(2, 7, 1, 200, 9);
  const Order c = MakeOrder(3, 7, 1, 300, 7);
  const Order d = MakeOrder(4, 7, 1, 50, 9);
  Push({Insert(a), Insert(b), Insert(c), Insert(d)});
  EXPECT_EQ(Shown("best", 7), "9");
  EXPECT_EQ(Shown("cheapest", 7), "0.50");
  Push({Delete(b)});  // 9 still has a row
  EXPECT_EQ(Shown("best", 7), "9");
  Push({Delete(d)});
  EXPECT_EQ(Shown("best", 7), "7");
  EXPECT_EQ(Shown("cheapest", 7), "1.00");
  Restart();
  EXPECT_EQ(Shown("best", 7), "7");
  EXPECT_EQ(Shown("cheapest", 7), "1.00");
  Push({Delete(c)});
  EXPECT_EQ(Shown("best", 7), "5");
  Push({Delete(a)});
  EXPECT_TRUE(Groups("best").empty());
  EXPECT_EQ(HiddenRecords(), 0u);
}

TEST_F(AggregatesTest, AvgIsSpelledAsPostgreSqlSpellsIt) {
  Push({Insert(MakeOrder(1, 7, 1, 1000, 1)), Insert(MakeOrder(2, 7, 1, 2000, 2)),
        Insert(MakeOrder(3, 7, 1, std::nullopt, 2))});
  EXPECT_EQ(Shown("mean", 7), "15.0000000000000000");
  Push({Insert(MakeOrder(4, 7, 1, 1, 1))});
  EXPECT_EQ(Shown("mean", 7), "10.0033333333333333");
}

TEST_F(AggregatesTest, SeveralAggregatesAreReadTogetherByName) {
  Push({Insert(MakeOrder(1, 7, 100, 1250, 4, 1'714'557'600'000'000)),
        Insert(MakeOrder(2, 7, 200, 750, std::nullopt, 1'714'561'200'000'000))});
  EXPECT_EQ(Shown("shop_all", 7), "(2, 1, 20.00, 4, 20240501T110000Z, 4.0000000000000000, 2)");
  auto prefix = derived_->PrefixOf("shop_all", {});
  auto page = derived_->List("shop_all", *prefix, "", 10);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->names, (std::vector<std::string>{"orders", "rated", "revenue", "worst", "latest",
                                                   "mean_rating", "buyers"}));
  // A group of only NULL arguments exists, its min, max and avg NULL, as in PostgreSQL.
  Push({Insert(MakeOrder(3, 8, std::nullopt, std::nullopt, std::nullopt))});
  EXPECT_EQ(Shown("shop_all", 8), "(1, 0, NULL, NULL, NULL, NULL, 0)");
}

TEST_F(AggregatesTest, DropsAndTruncatesTakeTheHiddenRecordsWithTheGroups) {
  Push({Insert(MakeOrder(1, 7, 100, 1250, 4)), Insert(MakeOrder(2, 8, 200, 750, 3))});
  EXPECT_GT(HiddenRecords(), 0u);
  SourceRowChange truncate;
  truncate.truncate = true;
  auto outcome = derived_->ApplyTransaction("orders", {&truncate, 1}, 10);
  ASSERT_TRUE(outcome) << outcome.error().message;
  engine_->committer().WaitDurable(outcome->required_epoch);
  EXPECT_EQ(HiddenRecords(), 0u);
  EXPECT_TRUE(Groups("shop_all").empty());
  Push({Insert(MakeOrder(3, 7, 100, 1250, 4))});
  for (const std::string_view name : {"buyers", "best", "cheapest", "mean", "shop_all"}) {
    ASSERT_TRUE(derived_->Drop(name));
  }
  EXPECT_EQ(HiddenRecords(), 0u);
}

// A time bucket past its retention goes with its hidden records; a late change to it is
// skipped, as for counts.
TEST_F(AggregatesTest, TheRetentionSweepTakesTheHiddenRecordsWithTheBuckets) {
  Define(R"sql(
    CREATE COUNTER best_per_hour AS
      SELECT shop, date_trunc('hour', at) AS hour, max(rating) AS best,
             count(DISTINCT customer) AS buyers
      FROM orders GROUP BY shop, hour WITH (retention = '2 hours');
  )sql");
  constexpr int64_t kMinute = 60'000'000;
  const int64_t now = clock_.NowMillis() * 1000;
  const Order a = MakeOrder(1, 7, 100, 100, 5, now - 30 * kMinute);
  const Order b = MakeOrder(2, 7, 200, 100, 9, now - 30 * kMinute);
  Push({Insert(a), Insert(b)});
  EXPECT_EQ(Groups("best_per_hour").size(), 1u);
  EXPECT_GT(HiddenRecords("best_per_hour:"), 0u);
  EXPECT_EQ(derived_->SweepRetention(100), 0u);
  clock_.Set(clock_.NowMillis() + 3 * 60 * 60 * 1000);
  EXPECT_EQ(derived_->SweepRetention(100), 1u);
  EXPECT_TRUE(Groups("best_per_hour").empty());
  EXPECT_EQ(HiddenRecords("best_per_hour:"), 0u);
  // The other counters of the orders keep theirs.
  EXPECT_GT(HiddenRecords("best:"), 0u);
  Push({Delete(b)});  // its bucket is past retention: skipped there
  EXPECT_TRUE(Groups("best_per_hour").empty());
  EXPECT_EQ(HiddenRecords("best_per_hour:"), 0u);
}

// `changes` random inserts, updates and deletes of orders of 12 shops over 1,000 minutes,
// NULLs among them, pushed in batches of 500, with a restart halfway and one at the end.
// Returns the rows left.
std::map<int64_t, Order> PushRandomChanges(AggregatesTest& test, uint64_t seed, int changes) {
  std::mt19937_64 rng(seed);
  std::map<int64_t, Order> rows;
  int64_t next_id = 1;
  auto maybe = [&](int64_t range) -> std::optional<int64_t> {
    if (rng() % 8 == 0) return std::nullopt;
    return static_cast<int64_t>(rng() % static_cast<uint64_t>(range)) - range / 4;
  };
  auto random_order = [&](int64_t id) {
    return MakeOrder(id, static_cast<int64_t>(rng() % 12), maybe(40), maybe(100'000), maybe(11),
                     kRandomStart + static_cast<int64_t>(rng() % 1000) * 60'000'000);
  };
  constexpr size_t kBatch = 500;
  std::vector<std::string> batch;
  for (int i = 0; i < changes; ++i) {
    const uint64_t what = rows.empty() ? 0 : rng() % 3;
    if (what == 0 || rows.size() < 50) {
      const Order order = random_order(next_id++);
      batch.push_back(Insert(order));
      rows[order.id] = order;
    } else {
      auto it = rows.lower_bound(static_cast<int64_t>(rng() % static_cast<uint64_t>(next_id)));
      if (it == rows.end()) it = rows.begin();
      if (what == 1) {
        const Order after = random_order(it->first);
        batch.push_back(Update(it->second, after));
        it->second = after;
      } else {
        batch.push_back(Delete(it->second));
        rows.erase(it);
      }
    }
    if (batch.size() == kBatch) {
      test.Push(batch);
      batch.clear();
    }
    if (i == changes / 2) test.Restart();
  }
  if (!batch.empty()) test.Push(batch);
  test.Restart();
  return rows;
}

// 100,000 random changes: every kind ends equal to a recount of the rows, group by group.
TEST_F(AggregatesTest, RandomChangesEqualARecount) {
  const std::map<int64_t, Order> rows = PushRandomChanges(*this, 17, 100'000);
  std::map<int64_t, Recount> shops;
  for (const auto& [id, order] : rows) shops[order.shop].Add(order, +1);
  std::set<std::string> composite;
  for (const auto& [shop, recount] : shops) {
    SCOPED_TRACE(fmt::format("shop {}", shop));
    EXPECT_EQ(Shown("revenue", shop), recount.Revenue());
    EXPECT_EQ(Shown("buyers", shop), recount.Buyers());
    EXPECT_EQ(Shown("best", shop), recount.Best());
    EXPECT_EQ(Shown("cheapest", shop), recount.Cheapest());
    EXPECT_EQ(Shown("mean", shop), recount.Mean());
    EXPECT_EQ(Shown("shop_all", shop), recount.All());
    composite.insert(fmt::format("shop_all:{}", shop));
  }
  EXPECT_EQ(Groups("shop_all"), composite);
}

// Range reads of every kind per hour: the hours of a shop taken together equal a recount of
// the rows of those hours, for random ranges after random changes (distinct values of
// several hours united, min and max over all of them, sums and avg exact).
TEST_F(AggregatesTest, RangesOfEveryKindEqualARecountOfTheirRows) {
  Define(R"sql(
    CREATE COUNTER revenue_hours AS
      SELECT shop, date_trunc('hour', at) AS hour, sum(total) FROM orders GROUP BY shop, hour;
    CREATE COUNTER buyers_hours AS
      SELECT shop, date_trunc('hour', at) AS hour, count(DISTINCT customer) FROM orders
      GROUP BY shop, hour;
    CREATE COUNTER shop_hours AS
      SELECT shop, date_trunc('hour', at) AS hour, count(*) AS orders, count(rating) AS rated,
             sum(total) AS revenue, min(rating) AS worst, max(at) AS latest,
             avg(rating) AS mean_rating, count(DISTINCT customer) AS buyers
      FROM orders GROUP BY shop, hour;
  )sql");
  const std::map<int64_t, Order> rows = PushRandomChanges(*this, 29, 20'000);
  constexpr int64_t kHour = 3'600'000'000;
  std::mt19937_64 rng(31);
  int with_rows = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t shop = static_cast<int64_t>(rng() % 13);  // 12: no rows
    const int64_t from = kRandomStart + static_cast<int64_t>(rng() % 20) * kHour - kHour;
    const int64_t to = from + static_cast<int64_t>(rng() % 8) * kHour;
    Recount recount;
    for (const auto& [id, order] : rows) {
      const int64_t hour = *order.at - *order.at % kHour;
      if (order.shop == shop && hour >= from && hour < to) recount.Add(order, +1);
    }
    with_rows += recount.rows > 0 ? 1 : 0;
    SCOPED_TRACE(
        fmt::format("shop {} from {} to {}", shop, FormatTimestamp(from), FormatTimestamp(to)));
    auto range = [&](std::string_view counter) {
      const std::string part = std::to_string(shop);
      const std::string_view parts[] = {part};
      auto read = derived_->Range(counter, parts, FormatTimestamp(from), FormatTimestamp(to));
      EXPECT_TRUE(read) << read.error().message;
      return read ? defs::GroupText(read->total.shown) : std::string();
    };
    EXPECT_EQ(range("revenue_hours"), recount.Revenue());
    EXPECT_EQ(range("buyers_hours"), recount.Buyers());
    EXPECT_EQ(range("shop_hours"), recount.All());
  }
  EXPECT_GT(with_rows, 100);  // most ranges hold rows: the recount is not of nothing
}

// A range's counts and sums are checked as they add up; a min or max never overflows.
TEST_F(AggregatesTest, RangesRefuseASumPastInt64) {
  Define(R"sql(
    CREATE SOURCE big (id bigint, day timestamptz, n bigint);
    CREATE COUNTER big_days AS
      SELECT date_trunc('day', day) AS d, sum(n) AS total, max(n) AS most FROM big GROUP BY d;
  )sql");
  const int64_t half = std::numeric_limits<int64_t>::max() / 2 + 1;
  Push({fmt::format(R"({{"source":"big","new":{{"id":1,"day":"2024-05-01T10:00:00Z","n":{}}}}})",
                    half),
        fmt::format(R"({{"source":"big","new":{{"id":2,"day":"2024-05-02T10:00:00Z","n":{}}}}})",
                    half)});
  auto one = derived_->Range("big_days", {}, "2024-05-01", "2024-05-02");
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(defs::GroupText(one->total.shown), fmt::format("({}, {})", half, half));
  EXPECT_EQ(one->names, (std::vector<std::string>{"total", "most"}));
  auto both = derived_->Range("big_days", {}, "2024-05-01", "2024-05-03");
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().code, ErrorCode::kOverflow);
}

// ---- Repairs: whole groups set with their records (RepairStates) --------------------------

std::string Tag(uint32_t aggregate, defs::RecordKind kind, std::string_view value = {}) {
  std::string tag;
  defs::AppendRecordTag(aggregate, kind, value, &tag);
  return tag;
}

// The ValueBytes of an argument of `type` (numerics at scale 2, the totals').
std::string Bytes(defs::Type type, int64_t value) {
  defs::AggregateColumn column;
  column.type = type;
  column.scale = type == defs::Type::kNumeric ? 2 : 0;
  const defs::Value arg = type == defs::Type::kTimestamp ? defs::Value::Timestamp(value)
                          : type == defs::Type::kNumeric ? defs::Value::Numeric(value, 2)
                                                         : defs::Value::Int(value);
  return *defs::ValueBytes(column, arg);
}

// What tally verify reads from PostgreSQL for a group of shop_all (orders, rated, revenue,
// worst, latest, mean_rating, buyers) or of buyers: the group's whole state.
GroupStateValue AllState(int64_t shop, const Recount& r) {
  using Kind = defs::RecordKind;
  GroupStateValue state{fmt::format("shop_all:{}", shop), r.rows, {}};
  auto add = [&](std::string tag, int64_t value) {
    if (value != 0) state.records.push_back({std::move(tag), value});
  };
  auto values = [&](uint32_t i, defs::Type type, const std::multiset<int64_t>& set) {
    for (auto it = set.begin(); it != set.end(); it = set.upper_bound(*it)) {
      add(Tag(i, Kind::kValue, Bytes(type, *it)), static_cast<int64_t>(set.count(*it)));
    }
  };
  add(Tag(1, Kind::kCount), r.rated);
  add(Tag(2, Kind::kSum), r.total_sum);
  add(Tag(2, Kind::kCount), r.totals);
  values(3, defs::Type::kInt64, r.ratings);
  values(4, defs::Type::kTimestamp, r.ats);
  add(Tag(5, Kind::kSum), r.rating_sum);
  add(Tag(5, Kind::kCount), r.rated);
  for (const auto& [customer, rows] : r.customers) {
    add(Tag(6, Kind::kValue, Bytes(defs::Type::kInt64, customer)), rows);
  }
  return state;
}

GroupStateValue BuyersState(int64_t shop, const Recount& r) {
  GroupStateValue state{
      fmt::format("buyers:{}", shop), static_cast<int64_t>(r.customers.size()), {}};
  for (const auto& [customer, rows] : r.customers) {
    state.records.push_back(
        {Tag(0, defs::RecordKind::kValue, Bytes(defs::Type::kInt64, customer)), rows});
  }
  return state;
}

class RepairStatesTest : public AggregatesTest {
 protected:
  void Repair(std::string_view counter, const std::vector<GroupStateValue>& states) {
    auto epoch = derived_->RepairStates(counter, states);
    ASSERT_TRUE(epoch) << epoch.error().message;
    engine_->committer().WaitDurable(*epoch);
  }

  // The record keys in the keyspace of `counter`'s groups.
  std::set<std::string> RecordsOf(std::string_view counter) {
    std::vector<std::string> keys;
    uint64_t cursor = 0;
    do {
      cursor = engine_->keyspace().Scan(cursor, 1024, nullptr, &keys);
    } while (cursor != 0);
    std::set<std::string> out;
    for (const std::string& key : keys) {
      const std::optional<RecordName> name = ParseRecordKey(key);
      if (name && FamilyName(name->group) == counter) out.insert(key);
    }
    return out;
  }

  // Every counter of `rows` equals their recount, and the records in the keyspace of
  // shop_all and buyers are exactly the recount's.
  void ExpectRecount(const std::map<int64_t, Order>& rows) {
    std::map<int64_t, Recount> shops;
    for (const auto& [id, order] : rows) shops[order.shop].Add(order, +1);
    std::set<std::string> groups;
    std::set<std::string> all_records;
    std::set<std::string> buyers_records;
    for (const auto& [shop, recount] : shops) {
      SCOPED_TRACE(fmt::format("shop {}", shop));
      EXPECT_EQ(Shown("shop_all", shop), recount.All());
      EXPECT_EQ(Shown("buyers", shop), recount.Buyers());
      groups.insert(fmt::format("shop_all:{}", shop));
      for (const GroupStateValue& state : {AllState(shop, recount), BuyersState(shop, recount)}) {
        for (const GroupStateValue::Record& record : state.records) {
          const auto tag = defs::ParseRecordTag(record.tag);
          const std::string key = RecordKey(state.key, tag->aggregate, tag->kind, tag->value);
          (state.key.starts_with("buyers") ? buyers_records : all_records).insert(key);
        }
      }
    }
    EXPECT_EQ(Groups("shop_all"), groups);
    EXPECT_EQ(RecordsOf("shop_all"), all_records);
    EXPECT_EQ(RecordsOf("buyers"), buyers_records);
  }
};

// tally counts rows the source never had and misses rows it has; setting the groups to the
// source's states makes them equal its recount, drops the records the groups no longer have
// and the group the source does not have, and the formula then keeps them exact.
TEST_F(RepairStatesTest, WholeGroupsAreSetAndThenKeptByTheFormula) {
  const int64_t at = 1'714'557'600'000'000;
  // What tally counted: shops 7 and 9, with customers, ratings and times the source lacks.
  Push({Insert(MakeOrder(1, 7, 100, 1250, 4, at)), Insert(MakeOrder(2, 7, 300, 50, 10, at + 1)),
        Insert(MakeOrder(3, 9, 400, 700, 2, at)), Insert(MakeOrder(4, 7, 100, 1, 1))});
  // The source's rows: shops 7 and 8.
  std::map<int64_t, Order> rows;
  for (const Order& o :
       {MakeOrder(1, 7, 100, 1250, 4, at), MakeOrder(5, 7, 200, 990, std::nullopt, at + 60'000'000),
        MakeOrder(6, 7, std::nullopt, std::nullopt, 7), MakeOrder(7, 8, 200, -35, 3, at),
        MakeOrder(8, 8, 200, 35, 3, std::nullopt)}) {
    rows[o.id] = o;
  }
  std::map<int64_t, Recount> shops;
  for (const auto& [id, order] : rows) shops[order.shop].Add(order, +1);
  Repair("shop_all", {AllState(7, shops[7]), AllState(8, shops[8]), AllState(9, Recount{})});
  Repair("buyers", {BuyersState(7, shops[7]), BuyersState(8, shops[8]), BuyersState(9, {})});
  EXPECT_EQ(Shown("shop_all", 7), "(3, 2, 22.40, 4, 20240501T100100Z, 5.5000000000000000, 2)");
  EXPECT_EQ(Shown("shop_all", 8), "(2, 2, 0.00, 3, 20240501T100000Z, 3.0000000000000000, 1)");
  EXPECT_EQ(Shown("buyers", 7), "2");
  ExpectRecount(rows);
  Restart();  // the mirror, rebuilt from the keyspace, holds the same
  ExpectRecount(rows);

  // Changes to the source's rows now count from the repaired states: the old max and min
  // go, sums and distinct counts move, groups appear and go.
  std::mt19937_64 rng(5);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::string> batch;
    for (int i = 0; i < 5; ++i) {
      const int64_t id = static_cast<int64_t>(rng() % 12) + 1;
      const Order next =
          MakeOrder(id, 7 + static_cast<int64_t>(rng() % 3), static_cast<int64_t>(rng() % 4) * 100,
                    static_cast<int64_t>(rng() % 2000) - 500, static_cast<int64_t>(rng() % 11),
                    at + (rng() % 5) * 60'000'000);
      const auto it = rows.find(id);
      if (it == rows.end()) {
        batch.push_back(Insert(next));
        rows[id] = next;
      } else if (rng() % 3 == 0) {
        batch.push_back(Delete(it->second));
        rows.erase(it);
      } else {
        batch.push_back(Update(it->second, next));
        it->second = next;
      }
    }
    Push(batch);
  }
  ExpectRecount(rows);
}

TEST_F(RepairStatesTest, ABadStateIsRefusedAndChangesNothing) {
  using Kind = defs::RecordKind;
  Push({Insert(MakeOrder(1, 7, 100, 1250, 4)), Insert(MakeOrder(2, 8, 200, 50, 6))});
  Recount seven;
  seven.Add(MakeOrder(1, 7, 100, 1250, 4), +1);
  const GroupStateValue good = AllState(7, seven);
  const std::string four = Bytes(defs::Type::kInt64, 4);
  auto with = [&](std::vector<GroupStateValue::Record> records, int64_t value = 1) {
    return GroupStateValue{"shop_all:8", value, std::move(records)};
  };
  const std::vector<std::pair<GroupStateValue, std::string>> refused = {
      {{"shop_all", 1, {}}, "key 'shop_all' is not a group of counter shop_all"},
      {{"other:8", 1, {}}, "key 'other:8' is not a group of counter shop_all"},
      {with({{"x", 1}}), "'x' is not a record tag"},
      {with({{"9n", 1}}), "counter shop_all has no aggregate 9"},
      {with({{"0n", 1}}), "keeps no record of kind n"},
      {with({{Tag(3, Kind::kValue, "abc"), 1}}),
       "the value bytes of its int64 argument are 8 bytes, not these 3"},
      {with({{"1n", 0}}), "a record is never 0"},
      {with({{"1n", -1}}), "a record of rows must be above 0"},
      {with({{"1n", 2}}), "a record counts 2 rows, more than the group's 1"},
      {with({{Tag(3, Kind::kValue, four), 1}, {Tag(3, Kind::kValue, four), 1}}), "given twice"},
      {with({{Tag(3, Kind::kValue, four), 1},
             {Tag(3, Kind::kValue, Bytes(defs::Type::kInt64, 5)), 1}}),
       "the values of aggregate 3 count more rows than the group's 1"},
      {with({{"2s", 5}}), "aggregate 2 has a sum without its count"},
      {with({{"1n", 1}}, 0), "a group without rows has no records"},
      {with({}, -1), "a group's rows are never below 0"},
  };
  for (const auto& [state, message] : refused) {
    SCOPED_TRACE(message);
    // The first group is good: nothing of the batch is written.
    const GroupStateValue batch[] = {good, state};
    auto result = derived_->RepairStates("shop_all", batch);
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(result.error().message.find(message), std::string::npos) << result.error().message;
    EXPECT_EQ(Shown("shop_all", 8), "(1, 1, 0.50, 6, NULL, 6.0000000000000000, 1)");
  }
  const GroupStateValue twice[] = {good, good};
  EXPECT_EQ(derived_->RepairStates("shop_all", twice).error().code, ErrorCode::kInvalidArgument);
  const GroupStateValue miscounted[] = {{"buyers:8", 2, {{Tag(0, Kind::kValue, four), 1}}}};
  auto distinct = derived_->RepairStates("buyers", miscounted);
  ASSERT_FALSE(distinct);
  EXPECT_NE(distinct.error().message.find("its value 2 is not its number of distinct values, 1"),
            std::string::npos)
      << distinct.error().message;
  // A plain counter is repaired by Repair, and a counter that is not by RepairStates.
  const GroupStateValue revenue[] = {{"revenue:8", 1, {}}};
  EXPECT_EQ(derived_->RepairStates("revenue", revenue).error().code, ErrorCode::kInvalidArgument);
  const KeyValue best[] = {{"best:8", 1}};
  EXPECT_EQ(derived_->Repair("best", best).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(derived_->RepairStates("nope", revenue).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(Shown("buyers", 8), "1");
  EXPECT_EQ(Shown("best", 8), "6");
}

}  // namespace
}  // namespace tally::derived
