#include "sources/postgres/pg_types.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "core/calendar.h"
#include "core/timestamp.h"
#include "core/timestamp_test_cases.h"

namespace tally::postgres {
namespace {

using definitions::SourceSchema;
using definitions::Type;
using definitions::Value;
using ::testing::HasSubstr;

int64_t Parsed(uint32_t oid, std::string_view text) {
  auto v = ParsePgText(oid, text);
  EXPECT_TRUE(v.has_value()) << text << ": " << (v ? "" : v.error().message);
  return v ? v->i : 0;
}

std::string Refused(uint32_t oid, std::string_view text) {
  auto v = ParsePgText(oid, text);
  EXPECT_FALSE(v.has_value()) << text << " parsed as " << (v ? DebugString(*v) : "");
  if (v) return "";
  EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument);
  return v.error().message;
}

TEST(PgTypesTest, MapsTypeOidsToTallyTypes) {
  for (uint32_t oid : {kInt2Oid, kInt4Oid, kInt8Oid, kNumericOid}) {
    EXPECT_EQ(TallyTypeForPg(oid), Type::kInt64) << oid;
  }
  EXPECT_EQ(TallyTypeForPg(kBoolOid), Type::kBool);
  for (uint32_t oid : {kTextOid, kVarcharOid, kBpcharOid, kNameOid}) {
    EXPECT_EQ(TallyTypeForPg(oid), Type::kText) << oid;
  }
  for (uint32_t oid : {kDateOid, kTimestampOid, kTimestamptzOid}) {
    EXPECT_EQ(TallyTypeForPg(oid), Type::kTimestamp) << oid;
  }
  EXPECT_EQ(TallyTypeForPg(701), std::nullopt);   // float8
  EXPECT_EQ(TallyTypeForPg(3802), std::nullopt);  // jsonb
  EXPECT_EQ(PgTypeName(kInt4Oid), "int4");
  EXPECT_EQ(PgTypeName(kTimestamptzOid), "timestamptz");
  EXPECT_EQ(PgTypeName(3802), "jsonb");
  EXPECT_EQ(PgTypeName(90001), "type oid 90001");
}

TEST(PgTypesTest, Integers) {
  EXPECT_EQ(Parsed(kInt2Oid, "-32768"), -32768);
  EXPECT_EQ(Parsed(kInt4Oid, "2147483647"), 2147483647);
  EXPECT_EQ(Parsed(kInt8Oid, "0"), 0);
  EXPECT_EQ(Parsed(kInt8Oid, "9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Parsed(kInt8Oid, "-9223372036854775808"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ParsePgText(kInt8Oid, "5")->type, Type::kInt64);
  EXPECT_THAT(Refused(kInt8Oid, "9223372036854775808"),
              HasSubstr("int8 value '9223372036854775808' is not an integer within int64"));
  EXPECT_THAT(Refused(kInt8Oid, "-9223372036854775809"), HasSubstr("int8"));
  for (std::string_view bad : {"", "-", "+1", " 1", "1 ", "1.0", "1e3", "0x10", "--1"}) {
    Refused(kInt4Oid, bad);
  }
}

// numeric: PostgreSQL's "12.0" equals 12, so integral values with a zero fraction are
// accepted; anything with a non-zero fraction or outside int64 is refused, naming it.
TEST(PgTypesTest, NumericThatFitsInt64) {
  EXPECT_EQ(Parsed(kNumericOid, "12"), 12);
  EXPECT_EQ(Parsed(kNumericOid, "12.0"), 12);
  EXPECT_EQ(Parsed(kNumericOid, "-12.000"), -12);
  EXPECT_EQ(Parsed(kNumericOid, "0.00"), 0);
  EXPECT_EQ(Parsed(kNumericOid, "-0"), 0);
  EXPECT_EQ(Parsed(kNumericOid, "9223372036854775807.000"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Parsed(kNumericOid, "-9223372036854775808"), std::numeric_limits<int64_t>::min());
  EXPECT_THAT(Refused(kNumericOid, "12.5"), HasSubstr("numeric value '12.5' is not an integer"));
  EXPECT_THAT(Refused(kNumericOid, "0.001"), HasSubstr("'0.001'"));
  EXPECT_THAT(Refused(kNumericOid, "9223372036854775808"),
              HasSubstr("numeric value '9223372036854775808' is not an integer within int64"));
  EXPECT_THAT(Refused(kNumericOid, "NaN"), HasSubstr("numeric value 'NaN' does not fit int64"));
  EXPECT_THAT(Refused(kNumericOid, "Infinity"), HasSubstr("'Infinity'"));
  EXPECT_THAT(Refused(kNumericOid, "-Infinity"), HasSubstr("'-Infinity'"));
  for (std::string_view bad : {"", ".", "12.", ".5", "1e5", "1.2.0", "-"})
    Refused(kNumericOid, bad);
}

TEST(PgTypesTest, Bool) {
  auto t = ParsePgText(kBoolOid, "t");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->type, Type::kBool);
  EXPECT_EQ(t->i, 1);
  EXPECT_EQ(Parsed(kBoolOid, "f"), 0);
  EXPECT_THAT(Refused(kBoolOid, "true"), HasSubstr("bool value 'true' is neither 't' nor 'f'"));
  Refused(kBoolOid, "");
}

TEST(PgTypesTest, TextTypesKeepTheBytesAsSent) {
  for (uint32_t oid : {kTextOid, kVarcharOid, kBpcharOid, kNameOid}) {
    const std::string_view sent = "ab  ";
    auto v = ParsePgText(oid, sent);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->type, Type::kText);
    EXPECT_EQ(v->s, "ab  ");  // bpchar keeps its padding
    EXPECT_EQ(v->s.data(), sent.data());
  }
  EXPECT_EQ(ParsePgText(kTextOid, "")->s, "");
}

// Every spelling of the shared table, read as a date, a timestamp and a timestamptz column.
TEST(PgTypesTest, TimestampSpellings) {
  const std::pair<uint32_t, uint8_t> columns[] = {
      {kDateOid, timestamp_cases::kPgDate},
      {kTimestampOid, timestamp_cases::kPgTimestamp},
      {kTimestamptzOid, timestamp_cases::kPgTimestamptz}};
  for (const timestamp_cases::Case& c : timestamp_cases::kCases) {
    for (const auto& [oid, reader] : columns) {
      auto value = ParsePgText(oid, c.text);
      if ((c.readers & reader) != 0) {
        ASSERT_TRUE(value) << PgTypeName(oid) << " '" << c.text << "': " << value.error().message;
        EXPECT_EQ(value->type, Type::kTimestamp);
        EXPECT_EQ(FormatTimestamp(value->i), c.instant) << PgTypeName(oid) << " '" << c.text << "'";
      } else {
        EXPECT_FALSE(value) << PgTypeName(oid) << " '" << c.text << "' read as "
                            << FormatTimestamp(value->i);
        if (!value) {
          EXPECT_EQ(value.error().code, ErrorCode::kInvalidArgument);
        }
      }
    }
  }
}

// The messages name the type and the value, then say what is wrong with it.
TEST(PgTypesTest, TimestampErrors) {
  EXPECT_EQ(Parsed(kTimestampOid, "294247-01-10 04:00:54.775807"),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Refused(kDateOid, "2023-02-29"), "date value '2023-02-29' is not a valid date");
  EXPECT_EQ(Refused(kDateOid, "infinity"),
            "date value 'infinity' is infinite; tally's timestamps are finite");
  EXPECT_EQ(Refused(kTimestampOid, "2024-05-01 13:45:07 BC"),
            "timestamp value '2024-05-01 13:45:07 BC' is before the common era (BC); it is not "
            "supported");
  EXPECT_EQ(Refused(kTimestampOid, "294247-01-10 04:00:54.775808"),
            "timestamp value '294247-01-10 04:00:54.775808' is outside the range of tally's "
            "timestamps");
  EXPECT_EQ(Refused(kTimestamptzOid, "2024-05-01 13:45:07+02:60"),
            "timestamptz value '2024-05-01 13:45:07+02:60' has an invalid UTC offset");
  EXPECT_EQ(Refused(kTimestamptzOid, "01/05/2024 13:45:07.123 UTC"),
            "timestamptz value '01/05/2024 13:45:07.123 UTC' is not in ISO 8601 format "
            "(2024-05-01, 2024-05-01T13:45:07.123456+02:00 or 20240501T134507Z)");
}

TEST(PgTypesTest, RefusesUnreadableTypes) {
  EXPECT_THAT(Refused(701, "1.5"), HasSubstr("PostgreSQL type float8 cannot be read by tally"));
}

// The relation as pgoutput announces it: column order differs from the source's, and it
// has a column the source does not declare.
RelationMessage PostsRelation() {
  RelationMessage r;
  r.oid = 16385;
  r.namespace_name = "public";
  r.name = "posts";
  r.replica_identity = 'f';
  r.columns = {{true, "id", kInt8Oid, -1},
               {false, "body", kTextOid, -1},
               {false, "rating", kNumericOid, -1},
               {false, "created_at", kTimestamptzOid, -1},
               {false, "is_published", kBoolOid, -1},
               {false, "title", kVarcharOid, 104}};
  return r;
}

SourceSchema PostsSource() {
  return SourceSchema{"posts",
                      {{"id", Type::kInt64},
                       {"is_published", Type::kBool},
                       {"rating", Type::kInt64},
                       {"created_at", Type::kTimestamp},
                       {"body", Type::kText}}};
}

TEST(MapColumnsTest, MapsByNameInSourceOrder) {
  auto m = MapColumns(PostsRelation(), PostsSource());
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_EQ(m->relation_oid, 16385u);
  EXPECT_EQ(m->table, "public.posts");
  EXPECT_EQ(m->relation_columns, 6u);
  ASSERT_EQ(m->columns.size(), 5u);
  const size_t expected[] = {0, 4, 2, 3, 1};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(m->columns[i].relation_index, expected[i]) << i;
  EXPECT_EQ(m->columns[2].type_oid, kNumericOid);
}

TEST(MapColumnsTest, RefusesAMissingColumn) {
  auto source = PostsSource();
  source.columns.push_back({"blog_id", Type::kInt64});
  auto m = MapColumns(PostsRelation(), source);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(m.error().message,
              HasSubstr("table public.posts has no column blog_id, which source posts needs"));
}

TEST(MapColumnsTest, AColumnNoCounterReadsMayBeGone) {
  auto source = PostsSource();
  source.columns.push_back({"blog_id", Type::kInt64});  // not in the relation
  std::vector<bool> needed(source.columns.size(), true);
  needed.back() = false;
  auto m = MapColumns(PostsRelation(), source, needed);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_EQ(m->columns.back().relation_index, ColumnMapping::kAbsent);
  needed.back() = true;
  EXPECT_FALSE(MapColumns(PostsRelation(), source, needed).has_value());
}

TEST(MapColumnsTest, RefusesTypesThatDoNotFit) {
  auto relation = PostsRelation();
  relation.columns[2].type_oid = kTextOid;  // rating text
  auto m = MapColumns(relation, PostsSource());
  ASSERT_FALSE(m.has_value());
  EXPECT_THAT(m.error().message,
              HasSubstr("table public.posts column rating has PostgreSQL type text, which does "
                        "not fit source posts's int64 column (it would feed a text column)"));
  relation = PostsRelation();
  relation.columns[1].type_oid = 3802;  // body jsonb
  m = MapColumns(relation, PostsSource());
  ASSERT_FALSE(m.has_value());
  EXPECT_THAT(m.error().message,
              HasSubstr("column body has PostgreSQL type jsonb, which does not fit source "
                        "posts's text column (tally cannot read this type)"));
}

TupleCell T(std::string_view s) { return {TupleCell::Kind::kText, s}; }
TupleCell N() { return {TupleCell::Kind::kNull, {}}; }
TupleCell U() { return {TupleCell::Kind::kUnchangedToast, {}}; }

class TupleToRowTest : public ::testing::Test {
 protected:
  void SetUp() override { mapping_ = *MapColumns(PostsRelation(), PostsSource()); }
  ColumnMapping mapping_;
  std::vector<Value> row_;
};

TEST_F(TupleToRowTest, ConvertsInSourceOrder) {
  Tuple t{{T("7"), T("hello"), T("4.00"), T("2024-05-01 15:45:07+02"), T("t"), T("Title")}};
  ASSERT_TRUE(TupleToRow(mapping_, t, nullptr, &row_).has_value());
  ASSERT_EQ(row_.size(), 5u);
  EXPECT_EQ(row_[0].type, Type::kInt64);
  EXPECT_EQ(row_[0].i, 7);
  EXPECT_EQ(row_[1].type, Type::kBool);
  EXPECT_EQ(row_[1].i, 1);
  EXPECT_EQ(row_[2].i, 4);
  EXPECT_EQ(row_[3].type, Type::kTimestamp);
  EXPECT_EQ(row_[3].i, MicrosFromCivil(2024, 5, 1, 13, 45, 7));
  EXPECT_EQ(row_[4].s, "hello");
}

TEST_F(TupleToRowTest, AnAbsentColumnReadsAsNull) {
  mapping_.columns[1].relation_index = ColumnMapping::kAbsent;
  Tuple t{{T("7"), T("hello"), T("4.00"), T("2024-05-01 15:45:07+02"), T("t"), T("Title")}};
  ASSERT_TRUE(TupleToRow(mapping_, t, nullptr, &row_).has_value());
  EXPECT_TRUE(row_[1].is_null());
  EXPECT_EQ(row_[0].i, 7);
}

TEST_F(TupleToRowTest, NullsStayNull) {
  Tuple t{{T("7"), N(), N(), N(), N(), N()}};
  ASSERT_TRUE(TupleToRow(mapping_, t, nullptr, &row_).has_value());
  for (size_t i = 1; i < 5; ++i) EXPECT_TRUE(row_[i].is_null()) << i;
}

TEST_F(TupleToRowTest, UnchangedToastComesFromTheOldTuple) {
  Tuple old_t{{T("7"), T("a very long body"), T("4"), N(), T("f"), T("x")}};
  Tuple new_t{{T("7"), U(), T("5"), N(), T("t"), U()}};
  ASSERT_TRUE(TupleToRow(mapping_, new_t, &old_t, &row_).has_value());
  EXPECT_EQ(row_[4].s, "a very long body");
  EXPECT_EQ(row_[4].s.data(), old_t.cells[1].text.data());
  EXPECT_EQ(row_[2].i, 5);
  // A NULL in the old tuple is taken as well.
  Tuple old_null{{T("7"), N(), T("4"), N(), T("f"), T("x")}};
  ASSERT_TRUE(TupleToRow(mapping_, new_t, &old_null, &row_).has_value());
  EXPECT_TRUE(row_[4].is_null());
}

TEST_F(TupleToRowTest, UnchangedToastWithoutOldValueIsAnError) {
  Tuple new_t{{T("7"), U(), T("5"), N(), T("t"), T("x")}};
  auto s = TupleToRow(mapping_, new_t, nullptr, &row_);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.error().message, HasSubstr("table public.posts column body: the change left a "
                                           "TOASTed value unchanged and sent no old value"));
  EXPECT_THAT(s.error().message, HasSubstr("REPLICA IDENTITY FULL"));
  Tuple old_u{{T("7"), U(), T("4"), N(), T("f"), T("x")}};
  EXPECT_FALSE(TupleToRow(mapping_, new_t, &old_u, &row_).has_value());
  // A column the source does not read may stay unchanged without an old tuple.
  Tuple title_u{{T("7"), T("b"), T("5"), N(), T("t"), U()}};
  EXPECT_TRUE(TupleToRow(mapping_, title_u, nullptr, &row_).has_value());
}

TEST_F(TupleToRowTest, RefusesAWidthOtherThanTheRelations) {
  Tuple t{{T("7"), T("b")}};
  auto s = TupleToRow(mapping_, t, nullptr, &row_);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kCorruption);
  EXPECT_THAT(s.error().message, HasSubstr("table public.posts has 2 columns, but its Relation "
                                           "message announced 6"));
  Tuple full{{T("7"), U(), T("5"), N(), T("t"), T("x")}};
  EXPECT_FALSE(TupleToRow(mapping_, full, &t, &row_).has_value());
}

TEST_F(TupleToRowTest, NamesTableAndColumnOfABadValue) {
  Tuple t{{T("7"), T("b"), T("4.5"), N(), T("t"), T("x")}};
  auto s = TupleToRow(mapping_, t, nullptr, &row_);
  ASSERT_FALSE(s.has_value());
  EXPECT_THAT(s.error().message,
              HasSubstr("table public.posts column rating: numeric value '4.5' is not an integer"));
}

}  // namespace
}  // namespace tally::postgres
