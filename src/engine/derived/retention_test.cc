// Time buckets with retention, over a real RocksDbStore and a ManualClock: buckets expire
// exactly at the boundary of the rule, late changes to expired buckets are skipped on both
// apply paths, a restart removes what expired meanwhile, the sweep is bounded, and range
// sums equal a recount of random rows.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/calendar.h"
#include "core/timestamp.h"
#include "core/timestamp_test_cases.h"
#include "engine/derived/derived_test_util.h"

namespace tally::derived {
namespace {

namespace defs = tally::definitions;

constexpr std::string_view kLikes = R"sql(
  CREATE SOURCE likes (id bigint, post_id bigint, weight bigint, created_at timestamp);
)sql";

// "2024-05-01T10:00:00Z" from the key spelling "20240501T100000Z" (whole seconds, years
// 0-9999).
std::string Iso(int64_t micros) {
  const std::string basic = FormatTimestamp(micros);
  return basic.substr(0, 4) + "-" + basic.substr(4, 2) + "-" + basic.substr(6, 2) + "T" +
         basic.substr(9, 2) + ":" + basic.substr(11, 2) + ":" + basic.substr(13, 2) + "Z";
}

struct Like {
  int64_t id;
  int64_t post;
  int64_t weight;
  int64_t created;  // micros
};

std::vector<defs::Value> Row(const Like& like) {
  return {defs::Value::Int(like.id), defs::Value::Int(like.post), defs::Value::Int(like.weight),
          defs::Value::Timestamp(like.created)};
}

std::string Json(const Like& like) {
  return "{\"id\":" + std::to_string(like.id) + ",\"post_id\":" + std::to_string(like.post) +
         ",\"weight\":" + std::to_string(like.weight) + ",\"created_at\":\"" + Iso(like.created) +
         "\"}";
}

// The tests sweep themselves: no sweeper thread.
constexpr DerivedOptions kNoSweeper{.retention_sweep_interval_ms = 0};

class RetentionTest : public DerivedStoreTest {
 protected:
  RetentionTest()
      : DerivedStoreTest("tally_retention_test_", MicrosFromCivil(2024, 5, 10) / 1000, kNoSweeper) {
  }

  void SetNow(int64_t micros) { clock_.Set(micros / 1000); }

  // One source transaction (the PostgreSQL path) of inserts, updates (old, new) and deletes.
  PushOutcome Apply(std::vector<std::pair<std::optional<Like>, std::optional<Like>>> changes) {
    std::vector<SourceRowChange> rows(changes.size());
    for (size_t i = 0; i < changes.size(); ++i) {
      if (changes[i].first) rows[i].old_row = Row(*changes[i].first);
      if (changes[i].second) rows[i].new_row = Row(*changes[i].second);
    }
    auto outcome = derived_->ApplyTransaction("likes", rows, ++position_);
    EXPECT_TRUE(outcome) << outcome.error().message;
    if (!outcome) return {};
    engine_->committer().WaitDurable(outcome->required_epoch);
    return *outcome;
  }

  // The groups of `counter` as its family index lists them.
  std::map<std::string, int64_t> Groups(std::string_view counter) {
    std::map<std::string, int64_t> groups;
    auto prefix = derived_->PrefixOf(counter, {});
    EXPECT_TRUE(prefix);
    auto page = derived_->List(counter, *prefix, "", 10000);
    EXPECT_TRUE(page);
    for (const KeyValue& item : page->items) groups[item.key] = item.value;
    return groups;
  }

  Result<int64_t> Range(std::string_view counter, std::vector<std::string_view> parts,
                        std::string_view from, std::string_view to) {
    auto range = derived_->Range(counter, parts, from, to);
    if (!range) return tl::unexpected(range.error());
    return range->total.value;
  }

  int64_t position_ = 0;
};

constexpr std::string_view kPerDay = R"sql(
  CREATE COUNTER likes_per_day AS
    SELECT post_id, date_trunc('day', created_at) AS day, count(*) FROM likes
    GROUP BY post_id, day WITH (retention = '20 days');
)sql";

// [May 1, May 2) with 20 days: kept while May 2 > now - 20 days, i.e. until May 22 00:00.
TEST_F(RetentionTest, ABucketExpiresExactlyWhenItsEndIsRetentionOld) {
  Define(kLikes);
  Define(kPerDay);
  Apply({{std::nullopt, Like{1, 7, 1, MicrosFromCivil(2024, 5, 1, 10)}},
         {std::nullopt, Like{2, 7, 1, MicrosFromCivil(2024, 5, 1, 23, 59)}},
         {std::nullopt, Like{3, 7, 1, MicrosFromCivil(2024, 5, 2)}}});
  const std::string may1 = "likes_per_day:7:20240501T000000Z";
  const std::string may2 = "likes_per_day:7:20240502T000000Z";

  SetNow(MicrosFromCivil(2024, 5, 22) - 1000);  // one millisecond before
  EXPECT_EQ(derived_->SweepRetention(100), 0u);
  EXPECT_EQ(Value(may1), 2);
  EXPECT_EQ(Range("likes_per_day", {"7"}, "2024-05-01T00:00:00Z", "2024-05-03T00:00:00Z"), 3);

  SetNow(MicrosFromCivil(2024, 5, 22));
  // A range read counts it as gone at once; the sweep removes it.
  EXPECT_EQ(Range("likes_per_day", {"7"}, "2024-05-01T00:00:00Z", "2024-05-03T00:00:00Z"), 1);
  EXPECT_EQ(derived_->SweepRetention(100), 1u);
  EXPECT_EQ(Value(may1), 0);
  EXPECT_EQ((Groups("likes_per_day")), (std::map<std::string, int64_t>{{may2, 1}}));
  EXPECT_EQ(derived_->Counters()[0].groups, 1u);

  SetNow(MicrosFromCivil(2024, 5, 23));
  EXPECT_EQ(derived_->SweepRetention(100), 1u);
  EXPECT_TRUE(Groups("likes_per_day").empty());
  // Durable: a restart (at an earlier time even) does not bring them back.
  SetNow(MicrosFromCivil(2024, 5, 10));
  Restart();
  EXPECT_TRUE(Groups("likes_per_day").empty());
  EXPECT_EQ(Value(may2), 0);
}

// Months are calendar months: [Feb 1, Mar 1) with '1 month' goes on April 1 00:00.
TEST_F(RetentionTest, MonthBucketsAndMonthRetentionFollowTheCalendar) {
  Define(kLikes);
  Define(R"sql(CREATE COUNTER monthly AS SELECT date_trunc('month', created_at) AS m, count(*)
               FROM likes GROUP BY m WITH (retention = '1 month'))sql");
  SetNow(MicrosFromCivil(2024, 3, 15));
  Apply({{std::nullopt, Like{1, 7, 1, MicrosFromCivil(2024, 2, 29, 23)}}});
  SetNow(MicrosFromCivil(2024, 4, 1) - 1000);
  EXPECT_EQ(derived_->SweepRetention(100), 0u);
  SetNow(MicrosFromCivil(2024, 4, 1));
  EXPECT_EQ(derived_->SweepRetention(100), 1u);
  EXPECT_EQ(Value("monthly:20240201T000000Z"), 0);
}

// An UPDATE or DELETE of an old row arriving after its bucket expired must not bring the
// bucket back with a negative or partial value: the expired side is skipped, the live one
// counts. Both apply paths (source transactions, pushed changes), swept or not yet.
TEST_F(RetentionTest, ALateChangeToAnExpiredBucketIsSkipped) {
  Define(kLikes);
  Define(kPerDay);
  const Like old_like{1, 7, 1, MicrosFromCivil(2024, 5, 1, 10)};
  const Like other{2, 7, 1, MicrosFromCivil(2024, 5, 1, 11)};
  Apply({{std::nullopt, old_like}, {std::nullopt, other}});
  const std::string may1 = "likes_per_day:7:20240501T000000Z";
  const std::string may25 = "likes_per_day:7:20240525T000000Z";

  // Expired, not swept yet: a DELETE of one of its rows leaves the bucket as it was.
  SetNow(MicrosFromCivil(2024, 5, 26));
  PushOutcome deleted = Apply({{other, std::nullopt}});
  EXPECT_EQ(deleted.expired, 1u);
  EXPECT_EQ(deleted.increments, 0u);
  EXPECT_EQ(Value(may1), 2);
  ASSERT_EQ(derived_->SweepRetention(100), 1u);

  // Swept: an UPDATE moving a row out of it counts only on the live side.
  Like moved = old_like;
  moved.created = MicrosFromCivil(2024, 5, 25, 9);
  PushOutcome updated = Apply({{old_like, moved}});
  EXPECT_EQ(updated.expired, 1u);
  EXPECT_EQ(Value(may1), 0);
  EXPECT_EQ(Value(may25), 1);
  // An insert dated in an expired bucket (a row backdated by the app) is skipped too.
  EXPECT_EQ(Apply({{std::nullopt, Like{3, 7, 1, MicrosFromCivil(2024, 5, 2)}}}).expired, 1u);

  // The same through a pushed change.
  const std::string update = R"({"source":"likes","old":)" + Json(moved) +
                             ",\"new\":" + Json(Like{1, 7, 1, MicrosFromCivil(2024, 4, 30)}) + "}";
  auto pushed = derived_->Push(update, "", decoder_);
  ASSERT_TRUE(pushed) << pushed.error().message;
  engine_->committer().WaitDurable(pushed->required_epoch);
  EXPECT_EQ(pushed->expired, 1u);
  EXPECT_EQ(Value(may25), 0);
  EXPECT_EQ((Groups("likes_per_day")), (std::map<std::string, int64_t>{}));
}

// Buckets that expire while the server is down go at start, before any read; the index by
// bucket is rebuilt, so later expiries are swept too.
TEST_F(RetentionTest, ARestartRemovesWhatExpiredMeanwhile) {
  Define(kLikes);
  Define(kPerDay);
  Apply({{std::nullopt, Like{1, 7, 1, MicrosFromCivil(2024, 5, 1)}},
         {std::nullopt, Like{2, 8, 1, MicrosFromCivil(2024, 5, 5)}},
         {std::nullopt, Like{3, 8, 1, MicrosFromCivil(2024, 5, 9)}}});
  ASSERT_EQ(Groups("likes_per_day").size(), 3u);
  SetNow(MicrosFromCivil(2024, 5, 26));  // May 1 and May 5 are past, May 9 is not
  Restart();
  EXPECT_EQ((Groups("likes_per_day")),
            (std::map<std::string, int64_t>{{"likes_per_day:8:20240509T000000Z", 1}}));
  Restart();  // the removal was durable
  EXPECT_EQ(Groups("likes_per_day").size(), 1u);
  SetNow(MicrosFromCivil(2024, 5, 30));
  EXPECT_EQ(derived_->SweepRetention(100), 1u);
  EXPECT_TRUE(Groups("likes_per_day").empty());
}

TEST_F(RetentionTest, ASweepRemovesAtMostItsBudgetOldestFirst) {
  Define(kLikes);
  Define(kPerDay);
  std::vector<std::pair<std::optional<Like>, std::optional<Like>>> inserts;
  for (int day = 1; day <= 9; ++day) {
    inserts.push_back({std::nullopt, Like{day, 7, 1, MicrosFromCivil(2024, 5, day)}});
  }
  Apply(inserts);
  SetNow(MicrosFromCivil(2024, 6, 30));  // all nine expired
  EXPECT_EQ(derived_->SweepRetention(4), 4u);
  auto left = Groups("likes_per_day");
  ASSERT_EQ(left.size(), 5u);
  EXPECT_EQ(left.begin()->first, "likes_per_day:7:20240505T000000Z");
  EXPECT_EQ(derived_->SweepRetention(4), 4u);
  EXPECT_EQ(derived_->SweepRetention(4), 1u);
  EXPECT_EQ(derived_->SweepRetention(4), 0u);
}

// Counters take turns: with more expired groups than the budget in each, every sweep starts
// at the counter after the one the previous sweep ended in, so none waits for another to
// be empty; within each, the oldest go first.
TEST_F(RetentionTest, SweepsTakeTheCountersInTurn) {
  Define(kLikes);
  Define(kPerDay);
  Define(R"sql(CREATE COUNTER likes_per_day_b AS SELECT post_id, date_trunc('day', created_at)
               AS day, count(*) FROM likes GROUP BY post_id, day WITH (retention = '20 days'))sql");
  Define(R"sql(CREATE COUNTER likes_per_day_c AS SELECT post_id, date_trunc('day', created_at)
               AS day, count(*) FROM likes GROUP BY post_id, day WITH (retention = '20 days'))sql");
  std::vector<std::pair<std::optional<Like>, std::optional<Like>>> inserts;
  for (int day = 1; day <= 9; ++day) {
    inserts.push_back({std::nullopt, Like{day, 7, 1, MicrosFromCivil(2024, 5, day)}});
  }
  Apply(inserts);
  SetNow(MicrosFromCivil(2024, 6, 30));  // all nine expired in each of the three
  const auto left = [&] {
    return std::vector<size_t>{Groups("likes_per_day").size(), Groups("likes_per_day_b").size(),
                               Groups("likes_per_day_c").size()};
  };
  EXPECT_EQ(derived_->SweepRetention(4), 4u);
  EXPECT_EQ(left(), (std::vector<size_t>{5, 9, 9}));
  EXPECT_EQ(derived_->SweepRetention(4), 4u);
  EXPECT_EQ(left(), (std::vector<size_t>{5, 5, 9}));
  EXPECT_EQ(Groups("likes_per_day_b").begin()->first, "likes_per_day_b:7:20240505T000000Z");
  EXPECT_EQ(derived_->SweepRetention(4), 4u);
  EXPECT_EQ(left(), (std::vector<size_t>{5, 5, 5}));
  // A budget larger than a counter's rest moves on to the next in the same sweep.
  EXPECT_EQ(derived_->SweepRetention(7), 7u);
  EXPECT_EQ(left(), (std::vector<size_t>{0, 3, 5}));
  EXPECT_EQ(derived_->SweepRetention(4), 4u);  // starts after likes_per_day_b
  EXPECT_EQ(left(), (std::vector<size_t>{0, 3, 1}));
  EXPECT_EQ(derived_->SweepRetention(100), 4u);
  EXPECT_EQ(left(), (std::vector<size_t>{0, 0, 0}));
}

// A counter without retention keeps everything, and range reads work on it as well; its
// groups are never swept.
TEST_F(RetentionTest, RangeReadsNeedOneTimeBucketAndCheckTheirArguments) {
  Define(kLikes);
  Define(R"sql(
    CREATE COUNTER per_day AS SELECT post_id, date_trunc('day', created_at) AS day, count(*)
      FROM likes GROUP BY post_id, day;
    CREATE COUNTER per_post AS SELECT post_id, count(*) FROM likes GROUP BY post_id;
    CREATE COUNTER two AS SELECT date_trunc('hour', created_at) AS h,
      date_trunc('day', created_at) AS d, count(*) FROM likes GROUP BY h, d;
    CREATE COUNTER weight AS SELECT date_trunc('day', created_at) AS day, sum(weight)
      FROM likes GROUP BY day;
  )sql");
  Apply({{std::nullopt, Like{1, 7, 5'000'000'000'000'000'000, MicrosFromCivil(2020, 1, 1)}},
         {std::nullopt, Like{2, 7, 5'000'000'000'000'000'000, MicrosFromCivil(2020, 1, 2)}}});
  EXPECT_EQ(derived_->SweepRetention(100), 0u);
  // Every spelling of an instant: ISO 8601 (offsets too), the key spelling, Unix seconds.
  EXPECT_EQ(Range("per_day", {"7"}, "2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z"), 1);
  EXPECT_EQ(Range("per_day", {"7"}, "20200101T000000Z", "20200103T000000Z"), 2);
  EXPECT_EQ(Range("per_day", {"7"}, "2020-01-01T01:00:00+02:00", "1577923200"), 1);
  EXPECT_EQ(Range("per_day", {"7"}, "1577836800", "1577836800"), 0);
  EXPECT_EQ(Range("per_day", {"8"}, "1577836800", "1577923201"), 0);
  // Instants outside the fixed-width years or not whole seconds take the full scan.
  EXPECT_EQ(Range("per_day", {"7"}, "-99999999999", "99999999999"), 2);
  EXPECT_EQ(Range("per_day", {"7"}, "2019-12-31T23:59:59.5Z", "2020-01-01T00:00:00.5Z"), 1);

  auto error = [&](std::string_view counter, std::vector<std::string_view> parts,
                   std::string_view from, std::string_view to) {
    auto range = Range(counter, parts, from, to);
    return range ? std::string("no error") : range.error().message;
  };
  EXPECT_EQ(error("nope", {}, "0", "1"), "counter nope does not exist");
  EXPECT_EQ(error("per_post", {"7"}, "0", "1"),
            "counter per_post has no time bucket: a range read needs exactly one "
            "date_trunc(...) key column");
  EXPECT_EQ(error("two", {}, "0", "1"),
            "counter two has no time bucket: a range read needs exactly one date_trunc(...) key "
            "column");
  EXPECT_EQ(error("per_day", {}, "0", "1"),
            "counter per_day has 1 key part besides its time bucket day: post_id; 0 given");
  EXPECT_EQ(error("per_day", {"x"}, "0", "1"),
            "counter per_day, key part 1 (post_id int64): \"x\" is not an int64");
  EXPECT_EQ(error("per_day", {"7"}, "yesterday", "1"),
            "from \"yesterday\" is not an instant: write 2024-05-01T00:00:00Z, 20240501T000000Z "
            "or Unix seconds");
  EXPECT_EQ(error("per_day", {"7"}, "0", "99999999999999999999"),
            "to \"99999999999999999999\" is not an instant: write 2024-05-01T00:00:00Z, "
            "20240501T000000Z or Unix seconds");
  EXPECT_EQ(error("per_day", {"7"}, "10", "9"),
            "the range is backwards: from 19700101T000010Z is after to 19700101T000009Z");
  // Eight digits read as a basic date as much as Unix seconds: refused, never taken as 1970.
  EXPECT_EQ(error("per_day", {"7"}, "20200101", "20200103"),
            "from \"20200101\" is ambiguous: 8 digits read as a date (YYYYMMDD) or as Unix "
            "seconds of 1970-1973; write the date as 2020-01-01 or 20200101T000000Z, an instant "
            "of 1970-1973 in ISO 8601");
  EXPECT_EQ(error("per_day", {"7"}, "2020-01-01", "20200103"),
            "to \"20200103\" is ambiguous: 8 digits read as a date (YYYYMMDD) or as Unix "
            "seconds of 1970-1973; write the date as 2020-01-03 or 20200103T000000Z, an instant "
            "of 1970-1973 in ISO 8601");
  // Other lengths, or with a sign, they are Unix seconds.
  EXPECT_EQ(Range("per_day", {"7"}, "-20200101", "1577923200"), 1);
  EXPECT_EQ(error("per_day", {"7"}, "2020-01-01", "020200101"),
            "the range is backwards: from 20200101T000000Z is after to 19700822T190821Z");
  EXPECT_EQ(error("weight", {}, "2020-01-01", "2020-01-03"),
            "the sum of counter weight from 20200101T000000Z to 20200103T000000Z is out of the "
            "int64 range");
  auto overflow =
      derived_->Range("weight", std::span<const std::string_view>(), "2020-01-01", "2020-01-03");
  ASSERT_FALSE(overflow);
  EXPECT_EQ(overflow.error().code, ErrorCode::kOverflow);
  EXPECT_EQ(Range("weight", {}, "2020-01-02", "2020-01-03"), 5'000'000'000'000'000'000);
}

// Every spelling of the shared table as the start of a range read. The instant read shows
// in the message of a backwards range: from it to the earliest instant of Unix seconds.
TEST_F(RetentionTest, RangeInstantsReadTheTable) {
  Define(kLikes);
  Define(R"sql(
    CREATE COUNTER per_day AS SELECT post_id, date_trunc('day', created_at) AS day, count(*)
      FROM likes GROUP BY post_id, day;
  )sql");
  const std::string_view earliest = "-9223372036854";
  const std::string backwards = "the range is backwards: from ";
  const std::string to = " is after to " + FormatTimestamp(-9223372036854 * 1'000'000);
  for (const timestamp_cases::Case& c : timestamp_cases::kCases) {
    auto range = Range("per_day", {"7"}, c.text, earliest);
    ASSERT_FALSE(range) << c.text;
    if ((c.readers & timestamp_cases::kInstant) != 0) {
      EXPECT_EQ(range.error().message, backwards + std::string(c.instant) + to) << c.text;
    } else {
      EXPECT_TRUE(range.error().message.starts_with("from \"")) << range.error().message;
    }
  }
}

// Random likes, inserted, updated and deleted over a month of clock time, in two counters
// (bucket last, bucket first): every range sum equals a recount of the rows in the model,
// buckets past retention excluded; sweeping then changes no range sum.
TEST_F(RetentionTest, RangeSumsEqualARecount) {
  Define(kLikes);
  Define(R"sql(
    CREATE COUNTER per_day AS SELECT post_id, date_trunc('day', created_at) AS day, count(*)
      FROM likes GROUP BY post_id, day WITH (retention = '20 days');
    CREATE COUNTER weight_per_hour AS SELECT date_trunc('hour', created_at) AS h, post_id,
      sum(weight) FROM likes GROUP BY h, post_id WITH (retention = '300 hours');
  )sql");
  // The clock moves while rows change, so some changes meet expired buckets and are
  // skipped; a live bucket never met one, so the recount of the rows is exact for it.
  int64_t now = MicrosFromCivil(2024, 5, 1);
  std::mt19937_64 rng(2024);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  const int64_t first = MicrosFromCivil(2024, 5, 1);
  auto random_like = [&](int64_t id) {
    return Like{id, 1 + pick(4), pick(100) - 20, first + pick(32 * kMicrosPerDay)};
  };
  std::map<int64_t, Like> rows;
  size_t skipped = 0;
  for (int round = 0; round < 40; ++round) {
    std::vector<std::pair<std::optional<Like>, std::optional<Like>>> txn;
    for (int i = 0; i < 50; ++i) {
      const int64_t id = 1 + pick(600);
      const auto it = rows.find(id);
      if (it == rows.end()) {
        txn.push_back({std::nullopt, random_like(id)});
        rows[id] = *txn.back().second;
      } else if (pick(4) == 0) {
        txn.push_back({it->second, std::nullopt});
        rows.erase(it);
      } else {
        txn.push_back({it->second, random_like(id)});
        it->second = *txn.back().second;
      }
    }
    skipped += Apply(txn).expired;
    now += 18 * kMicrosPerHour + 45 * kMicrosPerMinute;
    SetNow(now);
  }

  // The recount: rows of `post` whose bucket starts in [from, to) and is within retention.
  auto recount = [&](bool per_day, int64_t post, int64_t from, int64_t to) {
    const defs::TimeUnit unit = per_day ? defs::TimeUnit::kDay : defs::TimeUnit::kHour;
    const defs::Retention retention = per_day ? defs::Retention{20, defs::TimeUnit::kDay}
                                              : defs::Retention{300, defs::TimeUnit::kHour};
    int64_t sum = 0;
    for (const auto& [id, like] : rows) {
      const int64_t bucket = *defs::TruncateTimestamp(unit, like.created);
      if (like.post != post || bucket < from || bucket >= to) continue;
      if (defs::BucketExpired(unit, bucket, retention, now)) continue;
      sum += per_day ? 1 : like.weight;
    }
    return sum;
  };
  EXPECT_GT(skipped, 100u);  // the late-change path was taken
  int nonzero = 0;
  auto check_all = [&]() {
    for (int i = 0; i < 400; ++i) {
      const bool per_day = i % 2 == 0;
      const int64_t post = 1 + pick(5);
      int64_t from = first - kMicrosPerDay + pick(36 * kMicrosPerDay);
      int64_t to = from + pick(15 * kMicrosPerDay);
      if (i % 3 == 0) {  // on bucket boundaries
        from = *defs::TruncateTimestamp(defs::TimeUnit::kHour, from);
        to = *defs::TruncateTimestamp(defs::TimeUnit::kHour, to);
      }
      const std::string post_text = std::to_string(post);
      const std::string from_text = Iso(from / kMicrosPerSecond * kMicrosPerSecond);
      const std::string to_text = std::to_string(to / kMicrosPerSecond);
      from = from / kMicrosPerSecond * kMicrosPerSecond;
      to = to / kMicrosPerSecond * kMicrosPerSecond;
      const std::string_view parts[] = {post_text};
      auto range =
          derived_->Range(per_day ? "per_day" : "weight_per_hour", parts, from_text, to_text);
      ASSERT_TRUE(range) << range.error().message;
      nonzero += range->total.value != 0 ? 1 : 0;
      ASSERT_EQ(range->total.value, recount(per_day, post, from, to))
          << (per_day ? "per_day " : "weight_per_hour ") << post << " " << from_text << " "
          << to_text;
    }
  };
  check_all();
  EXPECT_GT(derived_->SweepRetention(100000), 0u);
  check_all();
  EXPECT_GT(nonzero, 300);  // the sums are not trivially 0
}

}  // namespace
}  // namespace tally::derived
