// Tests of the compiled evaluator: PostgreSQL's semantics operator by operator, the key
// encoding, row checks, and a property test against an independent reference.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/timestamp.h"
#include "core/timestamp_test_cases.h"
#include "engine/definitions/compiler.h"
#include "engine/definitions/test_util.h"
#include "engine/definitions/time_util.h"

namespace tally::definitions {
namespace {

using testing::MustCompile;
using testing::NullPost;

// Evaluates `counter` over `row` and returns "key=value", "skip" or "error: message".
std::string Eval(const CompiledCounter& counter, const std::vector<Value>& row) {
  EvalScratch scratch;
  auto result = counter.Evaluate(row, scratch);
  if (!result) return "error: " + result.error().message;
  if (!result->passes) return "skip";
  return counter.Key(*result) + "=" + std::to_string(result->value);
}

TEST(EvaluatorTest, FilterUsesThreeValuedLogic) {
  const CompiledCounter c = MustCompile(
      "CREATE COUNTER c AS SELECT count(*) FROM posts WHERE is_published AND NOT is_deleted");
  const std::optional<bool> values[] = {true, false, std::nullopt};
  for (const auto published : values) {
    for (const auto deleted : values) {
      auto row = NullPost();
      if (published) row[testing::kIsPublished] = Value::Bool(*published);
      if (deleted) row[testing::kIsDeleted] = Value::Bool(*deleted);
      const bool passes = published == true && deleted == false;
      EXPECT_EQ(Eval(c, row), passes ? "c=1" : "skip");
    }
  }
}

TEST(EvaluatorTest, OrAndNotFollowKleeneLogic) {
  const CompiledCounter c = MustCompile(
      "CREATE COUNTER c AS SELECT count(*) FROM posts WHERE NOT (is_published OR is_deleted)");
  auto row = NullPost();
  row[testing::kIsPublished] = Value::Bool(false);
  EXPECT_EQ(Eval(c, row), "skip");  // NOT (false OR NULL) = NULL
  row[testing::kIsDeleted] = Value::Bool(false);
  EXPECT_EQ(Eval(c, row), "c=1");
  row[testing::kIsPublished] = Value::Null();
  row[testing::kIsDeleted] = Value::Bool(true);
  EXPECT_EQ(Eval(c, row), "skip");  // NOT (NULL OR true) = false
}

// One int64 expression of rating and blog_id as the key, to test arithmetic.
std::string Arith(std::string_view expr, std::optional<int64_t> a, std::optional<int64_t> b) {
  const CompiledCounter c = MustCompile("CREATE COUNTER k AS SELECT " + std::string(expr) +
                                        " AS x, count(*) FROM posts GROUP BY x");
  auto row = NullPost();
  if (a) row[testing::kRating] = Value::Int(*a);
  if (b) row[testing::kBlogId] = Value::Int(*b);
  return Eval(c, row);
}

TEST(EvaluatorTest, ArithmeticIsPostgresBigint) {
  EXPECT_EQ(Arith("rating + blog_id", 2, 3), "k:5=1");
  EXPECT_EQ(Arith("rating - blog_id", 2, 3), "k:-1=1");
  EXPECT_EQ(Arith("rating * blog_id", -4, 3), "k:-12=1");
  EXPECT_EQ(Arith("rating + blog_id", 2, std::nullopt), "k:\\N=1");
  EXPECT_EQ(Arith("-rating", 5, std::nullopt), "k:-5=1");
  // Division truncates toward zero; % takes the dividend's sign.
  EXPECT_EQ(Arith("rating / blog_id", -7, 2), "k:-3=1");
  EXPECT_EQ(Arith("rating / blog_id", 7, -2), "k:-3=1");
  EXPECT_EQ(Arith("rating % blog_id", -7, 2), "k:-1=1");
  EXPECT_EQ(Arith("rating % blog_id", 7, -2), "k:1=1");
  EXPECT_EQ(Arith("rating % blog_id", INT64_MIN, -1), "k:0=1");
  EXPECT_EQ(Arith("rating / blog_id", 1, 0), "error: division by zero");
  EXPECT_EQ(Arith("rating % blog_id", 1, 0), "error: division by zero");
  EXPECT_EQ(Arith("rating / blog_id", std::nullopt, 0), "k:\\N=1");
  // Overflow is an error, never a wraparound.
  EXPECT_EQ(Arith("rating + blog_id", INT64_MAX, 1), "error: bigint out of range");
  EXPECT_EQ(Arith("rating - blog_id", INT64_MIN, 1), "error: bigint out of range");
  EXPECT_EQ(Arith("rating * blog_id", INT64_MAX / 2 + 1, 2), "error: bigint out of range");
  EXPECT_EQ(Arith("rating / blog_id", INT64_MIN, -1), "error: bigint out of range");
  EXPECT_EQ(Arith("-rating", INT64_MIN, std::nullopt), "error: bigint out of range");
  EXPECT_EQ(Arith("rating + blog_id", INT64_MAX, -1), "k:9223372036854775806=1");
}

TEST(EvaluatorTest, OverflowErrorHasItsCode) {
  const CompiledCounter c = MustCompile("CREATE COUNTER k AS SELECT sum(rating * 2) FROM posts");
  auto row = NullPost();
  row[testing::kRating] = Value::Int(INT64_MAX);
  EvalScratch scratch;
  auto result = c.Evaluate(row, scratch);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kOverflow);
}

TEST(EvaluatorTest, EvaluationIsLazyWherePostgresIs) {
  auto row = NullPost();
  row[testing::kBlogId] = Value::Int(0);
  row[testing::kRating] = Value::Int(10);
  // The keys of a row that fails WHERE are never computed.
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT rating / blog_id AS q, count(*) "
                             "FROM posts WHERE blog_id <> 0 GROUP BY q"),
                 row),
            "skip");
  // AND and OR stop at the deciding operand.
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT count(*) FROM posts "
                             "WHERE blog_id <> 0 AND rating / blog_id > 1"),
                 row),
            "skip");
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT count(*) FROM posts "
                             "WHERE blog_id = 0 OR rating / blog_id > 1"),
                 row),
            "c=1");
  // CASE and coalesce evaluate only what they return.
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT CASE WHEN blog_id = 0 THEN -1 "
                             "ELSE rating / blog_id END AS q, count(*) FROM posts GROUP BY q"),
                 row),
            "c:-1=1");
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT coalesce(rating, rating / blog_id) "
                             "AS q, count(*) FROM posts GROUP BY q"),
                 row),
            "c:10=1");
  // BETWEEN is (a >= b AND a <= c): c is not evaluated when a < b.
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT count(*) FROM posts "
                             "WHERE rating BETWEEN 11 AND rating / blog_id"),
                 row),
            "skip");
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT count(*) FROM posts "
                             "WHERE rating BETWEEN 1 AND rating / blog_id"),
                 row),
            "error: division by zero");
}

// Whether `where` holds for a post with the given rating and status.
std::string Where(std::string_view where, std::optional<int64_t> rating,
                  std::optional<std::string_view> status = std::nullopt) {
  const CompiledCounter c =
      MustCompile("CREATE COUNTER c AS SELECT count(*) FROM posts WHERE " + std::string(where));
  auto row = NullPost();
  if (rating) row[testing::kRating] = Value::Int(*rating);
  if (status) row[testing::kStatus] = Value::Text(*status);
  return Eval(c, row) == "c=1" ? "yes" : "no";
}

TEST(EvaluatorTest, InBetweenAndIsNull) {
  EXPECT_EQ(Where("rating IN (1, 2)", 2), "yes");
  EXPECT_EQ(Where("rating IN (1, 2)", 3), "no");
  EXPECT_EQ(Where("rating IN (1, NULL)", 1), "yes");
  EXPECT_EQ(Where("(rating IN (1, NULL)) IS NULL", 2), "yes");
  EXPECT_EQ(Where("(rating NOT IN (1, NULL)) IS NULL", 2), "yes");
  EXPECT_EQ(Where("rating NOT IN (1, 2)", 3), "yes");
  EXPECT_EQ(Where("(rating IN (1, 2)) IS NULL", std::nullopt), "yes");
  EXPECT_EQ(Where("rating BETWEEN 1 AND 3", 1), "yes");
  EXPECT_EQ(Where("rating BETWEEN 1 AND 3", 3), "yes");
  EXPECT_EQ(Where("rating BETWEEN 1 AND 3", 4), "no");
  EXPECT_EQ(Where("rating NOT BETWEEN 1 AND 3", 4), "yes");
  EXPECT_EQ(Where("rating BETWEEN 3 AND 1", 2), "no");  // not SYMMETRIC
  EXPECT_EQ(Where("(rating BETWEEN NULL AND 3) IS NULL", 2), "yes");
  EXPECT_EQ(Where("rating BETWEEN NULL AND 1", 2), "no");  // NULL AND false = false
  EXPECT_EQ(Where("rating IS NULL", std::nullopt), "yes");
  EXPECT_EQ(Where("rating IS NOT NULL", std::nullopt), "no");
  EXPECT_EQ(Where("rating = NULL", std::nullopt), "no");
  EXPECT_EQ(Where("NOT (rating = NULL)", 1), "no");
}

TEST(EvaluatorTest, TextComparesBytewise) {
  EXPECT_EQ(Where("status < 'a'", 0, "B"), "yes");         // 'B' < 'a' under COLLATE "C"
  EXPECT_EQ(Where("status > 'z'", 0, "\xC3\xA9"), "yes");  // é after every ASCII letter
  EXPECT_EQ(Where("status = 'live'", 0, "live"), "yes");
  EXPECT_EQ(Where("status <> 'live'", 0, "Live"), "yes");
  EXPECT_EQ(Where("status < 'ab'", 0, "a"), "yes");
  EXPECT_EQ(Where("status IN ('x', 'live')", 0, "live"), "yes");
  EXPECT_EQ(Where("lower(status) = 'live'", 0, "LiVe"), "yes");
  EXPECT_EQ(Where("upper(status) = 'LIVE'", 0, "live"), "yes");
}

TEST(EvaluatorTest, LowerAndUpperChangeAsciiOnly) {
  const CompiledCounter c = MustCompile(
      "CREATE COUNTER c AS SELECT lower(title) AS l, upper(status) AS u, count(*) FROM posts "
      "GROUP BY l, u");
  auto row = NullPost();
  row[testing::kTitle] = Value::Text("\xC3\x80 Bc:D");    // "À Bc:D"
  row[testing::kStatus] = Value::Text("\xC3\xA0 bc\\d");  // "à bc\d"
  EXPECT_EQ(Eval(c, row), "c:\xC3\x80 bc\\:d:\xC3\xA0 BC\\\\D=1");
}

TEST(EvaluatorTest, DateTruncAsPostgres) {
  const CompiledCounter c = MustCompile(
      "CREATE COUNTER c AS SELECT date_trunc('minute', created_at) AS a, "
      "date_trunc('hour', created_at) AS b, date_trunc('day', created_at) AS d, "
      "date_trunc('week', created_at) AS w, date_trunc('month', created_at) AS m, count(*) "
      "FROM posts GROUP BY a, b, d, w, m");
  auto row = NullPost();
  // Wednesday 2024-05-15 13:45:30.123456: its week starts on Monday the 13th.
  row[testing::kCreatedAt] = Value::Timestamp(MicrosFromCivil(2024, 5, 15, 13, 45, 30, 123456));
  EXPECT_EQ(Eval(c, row),
            "c:20240515T134500Z:20240515T130000Z:20240515T000000Z:20240513T000000Z:"
            "20240501T000000Z=1");
  // Before the epoch truncation still goes down, not toward zero.
  row[testing::kCreatedAt] = Value::Timestamp(MicrosFromCivil(1969, 12, 31, 23, 59, 59, 500000));
  EXPECT_EQ(Eval(c, row),
            "c:19691231T235900Z:19691231T230000Z:19691231T000000Z:19691229T000000Z:"
            "19691201T000000Z=1");
  // A Monday is its own week; a Sunday belongs to the week of the Monday before.
  row[testing::kCreatedAt] = Value::Timestamp(MicrosFromCivil(2024, 3, 4));
  EXPECT_EQ(Eval(c, row),
            "c:20240304T000000Z:20240304T000000Z:20240304T000000Z:20240304T000000Z:"
            "20240301T000000Z=1");
  row[testing::kCreatedAt] = Value::Timestamp(MicrosFromCivil(2024, 3, 3, 23));
  EXPECT_EQ(Eval(c, row),
            "c:20240303T230000Z:20240303T230000Z:20240303T000000Z:20240226T000000Z:"
            "20240301T000000Z=1");
  row[testing::kCreatedAt] = Value::Null();
  EXPECT_EQ(Eval(c, row), "c:\\N:\\N:\\N:\\N:\\N=1");
  row[testing::kCreatedAt] = Value::Timestamp(INT64_MIN);
  EXPECT_EQ(Eval(c, row), "error: timestamp out of range");
}

TEST(EvaluatorTest, AggregatesIgnoreNull) {
  auto row = NullPost();
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT count(rating) FROM posts"), row), "c=0");
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT sum(rating) FROM posts"), row), "c=0");
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT count(*) FROM posts"), row), "c=1");
  row[testing::kRating] = Value::Int(-5);
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT count(rating) FROM posts"), row), "c=1");
  EXPECT_EQ(Eval(MustCompile("CREATE COUNTER c AS SELECT sum(rating) FROM posts"), row), "c=-5");
}

TEST(EvaluatorTest, RowsAreChecked) {
  const CompiledCounter c =
      MustCompile("CREATE COUNTER c AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id");
  EvalScratch scratch;
  std::vector<Value> short_row(3);
  auto result = c.Evaluate(short_row, scratch);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().message, "a row of source posts needs 9 columns, got 3");
  auto row = NullPost();
  row[testing::kBlogId] = Value::Text("7");
  result = c.Evaluate(row, scratch);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kWrongType);
  EXPECT_EQ(result.error().message, "column blog_id of source posts must be int64, not text");
  // A column the counter does not read may hold anything.
  row[testing::kBlogId] = Value::Int(7);
  row[testing::kRating] = Value::Text("junk");
  EXPECT_EQ(Eval(c, row), "c:7=1");
}

// What the catalog keeps, create_sql(), is fully parenthesised and nests deeper than the text
// it came from. Found by fuzz/sql_definitions_fuzz.cc: 127 NOTs were accepted, but their
// create_sql() (one more pair of parentheses) was refused when the catalog was loaded, so
// the server could not start again. Now every definition accepted reads back, and one whose
// normal form would not is refused at the deepest expression.
TEST(CompileTest, EveryAcceptedDefinitionReadsBackFromItsCreateSql) {
  const auto chain = [](std::string_view link, int links, std::string_view end) {
    std::string sql = "CREATE COUNTER c AS SELECT count(*) FROM posts WHERE ";
    for (int i = 0; i < links; ++i) sql += link;
    return sql + std::string(end);
  };
  for (const std::string& sql :
       {chain("NOT ", 126, "true"), chain("NOT ", 127, "true"), chain("- ", 63, "rating > 0"),
        chain("- ", 64, "rating > 0"), chain("rating + ", 127, "1 > 0"),
        // A literal key grouped by its alias (a fuzzer's find: the normalised SQL said
        // GROUP BY 5, a position).
        std::string("CREATE COUNTER c AS SELECT 5 AS r, count(*) FROM posts GROUP BY r"),
        std::string("CREATE COUNTER c AS SELECT -5 AS r, count(*) FROM posts GROUP BY r"),
        std::string("CREATE COUNTER c AS SELECT 'x' AS r, user_id, count(*) FROM posts "
                    "GROUP BY user_id, r")}) {
    auto compiled = CompileSql(sql, testing::PostsCatalog);
    if (!compiled) {
      EXPECT_TRUE(
          compiled.error().message.ends_with("expression nested too deeply (over 128 levels)"))
          << sql << ": " << compiled.error().message;
      continue;
    }
    auto again = CompileSql(compiled->create_sql(), testing::PostsCatalog);
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(again->Explain(), compiled->Explain());
  }
  EXPECT_TRUE(CompileSql(chain("NOT ", 126, "true"), testing::PostsCatalog));
  const auto refused = CompileSql(chain("NOT ", 127, "true"), testing::PostsCatalog);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "line 1, column 54: expression nested too deeply (over 128 levels)");
}

TEST(KeyTest, CanonicalSpelling) {
  EXPECT_EQ(EncodeKey("blog_posts", std::vector<Value>{Value::Int(7), Value::Int(3)}),
            "blog_posts:7:3");
  EXPECT_EQ(EncodeKey("total", {}), "total");
  EXPECT_EQ(EncodeKey("c", std::vector<Value>{Value::Int(INT64_MIN), Value::Bool(true),
                                              Value::Bool(false), Value::Null()}),
            "c:-9223372036854775808:true:false:\\N");
  EXPECT_EQ(EncodeKey("c", std::vector<Value>{Value::Text("a:b\\c"), Value::Text("\\N"),
                                              Value::Text("")}),
            "c:a\\:b\\\\c:\\\\N:");
  EXPECT_EQ(EncodeKey("c", std::vector<Value>{Value::Timestamp(0)}), "c:19700101T000000Z");
  EXPECT_EQ(EncodeKey("c", std::vector<Value>{Value::Timestamp(-1)}), "c:19691231T235959.999999Z");
}

// A stored key's time bucket is read back (BucketOfKey) as the shared table says; texts
// with ':' cannot be one part of a key.
TEST(KeyTest, BucketOfKeyReadsTheTable) {
  const CompiledCounter c = MustCompile(
      "CREATE COUNTER c AS SELECT date_trunc('day', created_at) AS d, count(*) FROM posts "
      "GROUP BY d");
  EXPECT_EQ(c.BucketOfKey("c:\\N"), std::nullopt);
  for (const timestamp_cases::Case& t : timestamp_cases::kCases) {
    if (t.text.find(':') != std::string_view::npos) continue;
    const std::optional<int64_t> bucket = c.BucketOfKey("c:" + std::string(t.text));
    if ((t.readers & timestamp_cases::kStoredKey) != 0) {
      ASSERT_TRUE(bucket) << t.text;
      EXPECT_EQ(FormatTimestamp(*bucket), t.instant) << t.text;
    } else {
      EXPECT_EQ(bucket, std::nullopt) << t.text << " read as " << FormatTimestamp(*bucket);
    }
  }
}

TEST(KeyTest, PartTextKeepsEscapes) {
  const std::string key =
      EncodeKey("c", std::vector<Value>{Value::Text("a:b\\"), Value::Timestamp(0), Value::Null()});
  EXPECT_EQ(KeyPartText(key, 0), "a\\:b\\\\");
  EXPECT_EQ(KeyPartText(key, 1), "19700101T000000Z");
  EXPECT_EQ(KeyPartText(key, 2), "\\N");
  EXPECT_EQ(KeyPartText(key, 3), std::nullopt);
  EXPECT_EQ(KeyPartText("c", 0), std::nullopt);
  EXPECT_EQ(KeyPartText("c:", 0), "");
}

// The retention rule at its exact boundary, for every unit of bucket and of retention.
TEST(RetentionTest, BucketExpiresWhenItsEndIsRetentionOld) {
  const int64_t day = MicrosFromCivil(2024, 5, 1);
  const Retention thirty_days{30, TimeUnit::kDay};
  // [May 1, May 2) is kept while May 2 > now - 30 days, i.e. until June 1 00:00.
  EXPECT_FALSE(BucketExpired(TimeUnit::kDay, day, thirty_days, MicrosFromCivil(2024, 6, 1) - 1));
  EXPECT_TRUE(BucketExpired(TimeUnit::kDay, day, thirty_days, MicrosFromCivil(2024, 6, 1)));
  EXPECT_EQ(BucketEnd(TimeUnit::kMinute, day), day + kMicrosPerMinute);
  EXPECT_EQ(BucketEnd(TimeUnit::kHour, day), day + kMicrosPerHour);
  EXPECT_EQ(BucketEnd(TimeUnit::kWeek, MicrosFromCivil(2024, 4, 29)), MicrosFromCivil(2024, 5, 6));
  EXPECT_EQ(BucketEnd(TimeUnit::kMonth, MicrosFromCivil(2024, 2, 1)), MicrosFromCivil(2024, 3, 1));
  EXPECT_EQ(BucketEnd(TimeUnit::kMonth, MicrosFromCivil(2024, 12, 1)), MicrosFromCivil(2025, 1, 1));
  EXPECT_EQ(BucketEnd(TimeUnit::kDay, INT64_MAX - 5), std::nullopt);
  // Months are calendar months, the day clamped as PostgreSQL's timestamp - interval.
  const Retention one_month{1, TimeUnit::kMonth};
  EXPECT_EQ(RetentionCutoff(one_month, MicrosFromCivil(2024, 3, 31, 12)),
            MicrosFromCivil(2024, 2, 29, 12));
  EXPECT_EQ(RetentionCutoff(one_month, MicrosFromCivil(2024, 1, 15)),
            MicrosFromCivil(2023, 12, 15));
  EXPECT_EQ(RetentionCutoff(Retention{13, TimeUnit::kMonth}, MicrosFromCivil(2024, 1, 31)),
            MicrosFromCivil(2022, 12, 31));
  EXPECT_EQ(RetentionCutoff(Retention{2, TimeUnit::kWeek}, day), day - 14 * kMicrosPerDay);
  EXPECT_EQ(RetentionCutoff(Retention{90, TimeUnit::kMinute}, day), day - 90 * kMicrosPerMinute);
  EXPECT_EQ(RetentionCutoff(thirty_days, INT64_MIN + 5), std::nullopt);
  EXPECT_FALSE(BucketExpired(TimeUnit::kDay, day, thirty_days, INT64_MIN + 5));
  // Found by fuzzing (fuzz/key_spelling_fuzz.cc): a month's retention took the time of day
  // as micros - days * kMicrosPerDay, whose product leaves int64 near INT64_MIN (UBSan).
  EXPECT_EQ(RetentionCutoff(one_month, INT64_MIN + 5), std::nullopt);
  EXPECT_FALSE(BucketExpired(TimeUnit::kMonth, MicrosFromCivil(2024, 2, 1), one_month, INT64_MIN));
  // A month bucket with a month of retention: [Feb 1, Mar 1) goes when now - 1 month
  // reaches Mar 1, on April 1.
  EXPECT_FALSE(BucketExpired(TimeUnit::kMonth, MicrosFromCivil(2024, 2, 1), one_month,
                             MicrosFromCivil(2024, 4, 1) - 1));
  EXPECT_TRUE(BucketExpired(TimeUnit::kMonth, MicrosFromCivil(2024, 2, 1), one_month,
                            MicrosFromCivil(2024, 4, 1)));
  // Monotonic in time, whatever the unit.
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    const auto unit = static_cast<TimeUnit>(rng() % 5);
    const Retention retention{static_cast<int64_t>(1 + rng() % 40),
                              static_cast<TimeUnit>(rng() % 5)};
    const int64_t start = *TruncateTimestamp(
        unit, MicrosFromCivil(2024, 1, 1) + static_cast<int64_t>(rng() % (400LL * kMicrosPerDay)));
    const int64_t now = start + static_cast<int64_t>(rng() % (5000LL * kMicrosPerDay));
    if (BucketExpired(unit, start, retention, now)) {
      ASSERT_TRUE(BucketExpired(unit, start, retention,
                                now + 1 + static_cast<int64_t>(rng() % kMicrosPerDay)));
    }
  }
}

TEST(RetentionTest, ParsesAndSpellsIntervals) {
  EXPECT_EQ(ParseRetention("30 days"), (Retention{30, TimeUnit::kDay}));
  EXPECT_EQ(ParseRetention(" 1 MONTH "), (Retention{1, TimeUnit::kMonth}));
  EXPECT_EQ(ParseRetention("2weeks"), (Retention{2, TimeUnit::kWeek}));
  EXPECT_EQ(RetentionText({1, TimeUnit::kHour}), "1 hour");
  EXPECT_EQ(RetentionText({90, TimeUnit::kMinute}), "90 minutes");
  for (const char* bad : {"", "30", "day", "1 year", "1 dayss", "1 day 2 hours", "-1 day", "0 day",
                          "1000001 days", "1e3 days"}) {
    EXPECT_FALSE(ParseRetention(bad)) << bad;
  }
}

TEST(EvaluatorTest, ScratchIsReusableAndCompiledCounterMovable) {
  CompiledCounter original = MustCompile(
      "CREATE COUNTER c AS SELECT coalesce(status, 'none') AS s, count(*) FROM posts "
      "GROUP BY s");
  CompiledCounter c = std::move(original);
  EvalScratch scratch;
  auto row = NullPost();
  for (int i = 0; i < 3; ++i) {
    auto result = c.Evaluate(row, scratch);
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(c.Key(*result), "c:none");
  }
}

// ---- Property test: the evaluator against an independent reference ----

// A reference outcome: an error, a row that does not pass, or a key and a value.
struct Outcome {
  bool error = false;
  bool passes = false;
  std::string key;
  int64_t value = 0;

  bool operator==(const Outcome&) const = default;
};

Outcome Failed() {
  Outcome o;
  o.error = true;
  return o;
}

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  if (o.error) return os << "error";
  if (!o.passes) return os << "skip";
  return os << o.key << "=" << o.value;
}

// A small SQL model written directly in C++ with std::optional as NULL, independent of
// the compiler: each reference below spells one definition out by hand.
using Int = std::optional<int64_t>;
using Bool = std::optional<bool>;

Int IntOf(const Value& v) { return v.is_null() ? Int() : Int(v.i); }
Bool BoolOf(const Value& v) { return v.is_null() ? Bool() : Bool(v.i != 0); }
Bool And(Bool a, Bool b) {
  if (a == false || b == false) return false;
  if (!a || !b) return std::nullopt;
  return true;
}
Bool Or(Bool a, Bool b) {
  if (a == true || b == true) return true;
  if (!a || !b) return std::nullopt;
  return false;
}
Bool Not(Bool a) { return a ? Bool(!*a) : Bool(); }

// The key part of a nullable int64 or text, spelled by hand (not by AppendKey).
std::string Part(Int v) { return v ? std::to_string(*v) : "\\N"; }
std::string Part(const Value& text) {
  if (text.is_null()) return "\\N";
  std::string out;
  for (const char c : text.s) {
    if (c == ':' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// The start of the ISO week (Monday) holding `micros`, with std::chrono's calendar.
std::string WeekPart(const Value& ts) {
  namespace chrono = std::chrono;
  if (ts.is_null()) return "\\N";
  const chrono::sys_time<chrono::microseconds> t{chrono::microseconds(ts.i)};
  const chrono::sys_days day = chrono::floor<chrono::days>(t);
  const chrono::sys_days monday = day - (chrono::weekday(day) - chrono::Monday);
  const chrono::year_month_day ymd(monday);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%04d%02u%02uT000000Z", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
  return buffer;
}

struct Definition {
  std::string sql;
  std::function<Outcome(const std::vector<Value>&)> reference;
};

std::vector<Definition> Definitions() {
  std::vector<Definition> out;
  // blog_posts: the published, not deleted posts of each user in each blog.
  out.push_back(
      {"CREATE COUNTER blog_posts AS SELECT user_id, blog_id, count(*) FROM posts "
       "WHERE is_published AND NOT is_deleted GROUP BY user_id, blog_id",
       [](const std::vector<Value>& r) {
         Outcome o;
         if (And(BoolOf(r[testing::kIsPublished]), Not(BoolOf(r[testing::kIsDeleted]))) != true) {
           return o;
         }
         o.passes = true;
         o.key = "blog_posts:" + Part(IntOf(r[testing::kUserId])) + ":" +
                 Part(IntOf(r[testing::kBlogId]));
         o.value = 1;
         return o;
       }});
  // CASE, IN, BETWEEN and a sum.
  out.push_back(
      {"CREATE COUNTER grades AS SELECT blog_id, CASE WHEN rating >= 4 THEN 'good' "
       "WHEN rating IN (1, 2) THEN 'bad' ELSE 'meh' END AS grade, sum(rating) FROM posts "
       "WHERE status IN ('live', 'Featured') OR rating BETWEEN 3 AND 5 GROUP BY blog_id, grade",
       [](const std::vector<Value>& r) {
         Outcome o;
         const Int rating = IntOf(r[testing::kRating]);
         const Value& status = r[testing::kStatus];
         Bool in_status;
         if (!status.is_null()) in_status = status.s == "live" || status.s == "Featured";
         Bool between;
         if (rating) between = *rating >= 3 && *rating <= 5;
         if (Or(in_status, between) != true) return o;
         std::string grade = "meh";
         if (rating && *rating >= 4) {
           grade = "good";
         } else if (rating && (*rating == 1 || *rating == 2)) {
           grade = "bad";
         }
         o.passes = true;
         o.key = "grades:" + Part(IntOf(r[testing::kBlogId])) + ":" + grade;
         o.value = rating.value_or(0);
         return o;
       }});
  // A time bucket, count(expr).
  out.push_back(
      {"CREATE COUNTER weekly AS SELECT date_trunc('week', created_at) AS w, "
       "count(title) FROM posts WHERE NOT is_deleted GROUP BY w",
       [](const std::vector<Value>& r) {
         Outcome o;
         if (Not(BoolOf(r[testing::kIsDeleted])) != true) return o;
         o.passes = true;
         o.key = "weekly:" + WeekPart(r[testing::kCreatedAt]);
         o.value = r[testing::kTitle].is_null() ? 0 : 1;
         return o;
       }});
  // Arithmetic that overflows and divides by zero, modulo of negatives.
  out.push_back(
      {"CREATE COUNTER arith AS SELECT (user_id * 3 + blog_id) % 7 AS k, "
       "sum(rating / (blog_id - 2)) FROM posts WHERE rating IS NOT NULL GROUP BY k",
       [](const std::vector<Value>& r) {
         Outcome o;
         const Int rating = IntOf(r[testing::kRating]);
         if (!rating) return o;
         const Int user = IntOf(r[testing::kUserId]);
         const Int blog = IntOf(r[testing::kBlogId]);
         Int k;
         if (user) {
           // user_id * 3 fails on its own, even when blog_id is NULL.
           __int128 wide = static_cast<__int128>(*user) * 3;
           if (wide > INT64_MAX || wide < INT64_MIN) return Failed();
           if (blog) {
             wide += *blog;
             if (wide > INT64_MAX || wide < INT64_MIN) return Failed();
             k = static_cast<int64_t>(wide % 7);
           }
         }
         int64_t value = 0;
         if (blog) {
           const __int128 divisor = static_cast<__int128>(*blog) - 2;
           if (divisor > INT64_MAX || divisor < INT64_MIN) return Failed();
           if (divisor == 0) return Failed();
           const __int128 q = static_cast<__int128>(*rating) / divisor;
           if (q > INT64_MAX || q < INT64_MIN) return Failed();
           value = static_cast<int64_t>(q);
         }
         o.passes = true;
         o.key = "arith:" + Part(k);
         o.value = value;
         return o;
       }});
  // coalesce, lower, text comparison.
  out.push_back(
      {"CREATE COUNTER statuses AS SELECT coalesce(lower(status), title, 'none') AS s, "
       "count(*) FROM posts WHERE title >= 'M' GROUP BY s",
       [](const std::vector<Value>& r) {
         Outcome o;
         const Value& title = r[testing::kTitle];
         if (title.is_null() || !(title.s >= std::string_view("M"))) return o;
         std::string s;
         const Value& status = r[testing::kStatus];
         if (!status.is_null()) {
           for (char c : status.s) {
             s += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
           }
         } else {
           s = std::string(title.s);
         }
         o.passes = true;
         o.key = "statuses:" + Part(Value::Text(s));
         o.value = 1;
         return o;
       }});
  return out;
}

class RandomRows {
 public:
  explicit RandomRows(uint64_t seed) : rng_(seed) {}

  std::vector<Value> Next() {
    std::vector<Value> row = NullPost();
    row[testing::kId] = MaybeNull(Value::Int(Pick(0, 1000)));
    row[testing::kUserId] = MaybeNull(Value::Int(Extreme()));
    row[testing::kBlogId] = MaybeNull(Value::Int(Extreme()));
    row[testing::kRating] = MaybeNull(Value::Int(Extreme()));
    row[testing::kIsPublished] = MaybeNull(Value::Bool(Pick(0, 1) == 1));
    row[testing::kIsDeleted] = MaybeNull(Value::Bool(Pick(0, 1) == 1));
    const int64_t sixty_years = 60LL * 366 * kMicrosPerDay;
    row[testing::kCreatedAt] = MaybeNull(Value::Timestamp(Pick(-sixty_years, sixty_years)));
    static constexpr std::string_view kTexts[] = {
        "live", "Live", "LIVE", "Featured",          "draft", "M", "Ma",
        "a:b",  "z\\",  "",     "\xC3\xA9t\xC3\xA9", "Zebra"};
    row[testing::kTitle] = MaybeNull(Value::Text(kTexts[Pick(0, std::size(kTexts) - 1)]));
    row[testing::kStatus] = MaybeNull(Value::Text(kTexts[Pick(0, std::size(kTexts) - 1)]));
    return row;
  }

 private:
  int64_t Pick(int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng_);
  }
  // Mostly small values, sometimes values at the edges of int64.
  int64_t Extreme() {
    switch (Pick(0, 9)) {
      case 0:
        return Pick(0, 1) ? INT64_MAX - Pick(0, 3) : INT64_MIN + Pick(0, 3);
      case 1:
        return Pick(INT64_MIN / 2, INT64_MAX / 2);
      default:
        return Pick(-5, 5);
    }
  }
  Value MaybeNull(Value v) { return Pick(0, 6) == 0 ? Value::Null() : v; }

  std::mt19937_64 rng_;
};

TEST(EvaluatorPropertyTest, MatchesIndependentReference) {
  RandomRows rows(20261122);
  EvalScratch scratch;
  for (const Definition& definition : Definitions()) {
    const CompiledCounter counter = MustCompile(definition.sql);
    int passes = 0;
    int errors = 0;
    for (int i = 0; i < 20000; ++i) {
      const std::vector<Value> row = rows.Next();
      const Outcome expected = definition.reference(row);
      Outcome actual;
      auto result = counter.Evaluate(row, scratch);
      if (!result) {
        actual.error = true;
      } else if (result->passes) {
        actual.passes = true;
        actual.key = counter.Key(*result);
        actual.value = result->value;
      }
      passes += actual.passes ? 1 : 0;
      errors += actual.error ? 1 : 0;
      ASSERT_EQ(actual, expected) << definition.sql << "\nrow " << i;
    }
    // The random rows exercise both sides of each filter.
    EXPECT_GT(passes, 100) << definition.sql;
    EXPECT_LT(passes, 19900) << definition.sql;
    if (counter.name() == "arith") {
      EXPECT_GT(errors, 100);
    }
  }
}

}  // namespace
}  // namespace tally::definitions
