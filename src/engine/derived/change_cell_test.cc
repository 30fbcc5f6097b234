// Tests of the conversion of pushed cells (change_cell.h), through the decoder: every type,
// integers at the int64 limits, every timestamp spelling of the shared table, and every
// refusal with its exact message — numbers past what simdjson holds included.
#include "engine/derived/change_cell.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/timestamp.h"
#include "core/timestamp_test_cases.h"
#include "engine/derived/change_json.h"
#include "engine/derived/change_json_test_util.h"

namespace tally::derived {
namespace {

using namespace tally::derived::testing;  // NOLINT(google-build-using-namespace): fixtures

TEST(ChangeCellTest, Integers) {
  ChangeDecoder decoder;
  for (const auto& [text, value] :
       std::vector<std::pair<std::string, int64_t>>{{"0", 0},
                                                    {"-0", 0},
                                                    {"9223372036854775807", INT64_MAX},
                                                    {"-9223372036854775808", INT64_MIN}}) {
    const auto changes =
        MustDecode(decoder, "{\"source\": \"likes\", \"new\": {\"post_id\": " + text + "}}");
    ASSERT_EQ(changes.size(), 1U);
    EXPECT_EQ((*changes[0].new_row)[0].i, value) << text;
  }
}

// The timestamp of `text` as FormatTimestamp spells it, or the error.
std::string Timestamp(std::string_view text) {
  ChangeDecoder decoder;
  auto decoded = decoder.Decode(
      "{\"source\": \"likes\", \"new\": {\"at\": \"" + std::string(text) + "\"}}", Lookup);
  if (!decoded) return decoded.error().message;
  return FormatTimestamp((*(*decoded)[0].new_row)[2].i);
}

// Every spelling of the shared table as a pushed cell; a refused one gets the same message.
TEST(ChangeCellTest, Timestamps) {
  for (const timestamp_cases::Case& c : timestamp_cases::kCases) {
    ASSERT_EQ(c.text.find_first_of("\"\\"), std::string_view::npos) << "escape " << c.text;
    if ((c.readers & timestamp_cases::kJson) != 0) {
      EXPECT_EQ(Timestamp(c.text), c.instant) << c.text;
    } else {
      EXPECT_EQ(Timestamp(c.text),
                "change 1: \"new\".\"at\" must be a timestamp like "
                "\"2024-05-01T13:45:00Z\", got \"" +
                    std::string(c.text) + "\"");
    }
  }
}

TEST(ChangeCellTest, CellErrors) {
  auto post = [](std::string_view row) {
    return DecodeError("[{\"source\": \"posts\", \"new\": " + PostRow(1) +
                       "}, {\"source\": \"posts\", \"old\": " + PostRow(1) +
                       ", \"new\": " + std::string(row) + "}]");
  };
  // The examples of change_json.h.
  EXPECT_EQ(post("{\"user_id\": 7, \"blog_id\": 3, \"is_published\": true, \"is_deleted\": false}"),
            "change 2: \"new\" has no column \"rating\", which counter author_rating reads");
  EXPECT_EQ(post(PostRow(7, ", \"rating\": \"5\"")), "change 2: \"new\".\"rating\" appears twice");
  EXPECT_EQ(post("{\"user_id\": 7, \"blog_id\": 3, \"rating\": \"5\", \"is_published\": true}"),
            "change 2: \"new\".\"rating\" must be an int64 (counter author_rating reads it), got "
            "a string");
  EXPECT_EQ(post("{\"user_id\": 7, \"blog_id\": 3, \"rating\": 18446744073709551615}"),
            "change 2: \"new\".\"rating\" is out of the int64 range (counter author_rating reads "
            "it), got 18446744073709551615");
  EXPECT_EQ(post("{\"user_id\": 7, \"blog_id\": 3, \"rating\": 9223372036854775808}"),
            "change 2: \"new\".\"rating\" is out of the int64 range (counter author_rating reads "
            "it), got 9223372036854775808");
  EXPECT_EQ(post("{\"user_id\": 7, \"blog_id\": 3, \"rating\": 99999999999999999999}"),
            "change 2: \"new\".\"rating\" is out of the int64 range (counter author_rating reads "
            "it), got 99999999999999999999");
  EXPECT_EQ(post("{\"user_id\": 1.5}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "1.5 (a number with a fraction or an exponent)");
  EXPECT_EQ(post("{\"user_id\": 1e3}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "1e3 (a number with a fraction or an exponent)");
  EXPECT_EQ(post("{\"user_id\": -2.0}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "-2.0 (a number with a fraction or an exponent)");
  EXPECT_EQ(post("{\"user_id\": 1e21}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "1e21 (a number with a fraction or an exponent)");
  EXPECT_EQ(post("{\"user_id\": 1.0}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "1.0 (a number with a fraction or an exponent)");
  EXPECT_EQ(post("{\"user_id\": true}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got a "
            "boolean");
  EXPECT_EQ(post("{\"user_id\": {}}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got an "
            "object");
  EXPECT_EQ(post("{\"is_published\": 1}"),
            "change 2: \"new\".\"is_published\" must be a bool (counter blog_posts reads it), "
            "got a number");
  EXPECT_EQ(post("{\"is_published\": \"true\"}"),
            "change 2: \"new\".\"is_published\" must be a bool (counter blog_posts reads it), "
            "got a string");
  // Columns no counter reads are checked too, without naming a counter.
  EXPECT_EQ(post("{\"id\": \"7\"}"), "change 2: \"new\".\"id\" must be an int64, got a string");
  EXPECT_EQ(post("{\"title\": 7}"), "change 2: \"new\".\"title\" must be a string, got a number");
  EXPECT_EQ(post("{\"title\": [\"a\"]}"),
            "change 2: \"new\".\"title\" must be a string, got an array");
  EXPECT_EQ(post("{\"created_at\": 1714571100}"),
            "change 2: \"new\".\"created_at\" must be a timestamp like \"2024-05-01T13:45:00Z\", "
            "got a number");
  EXPECT_EQ(post("{\"created_at\": \"yesterday\"}"),
            "change 2: \"new\".\"created_at\" must be a timestamp like \"2024-05-01T13:45:00Z\", "
            "got \"yesterday\"");
  EXPECT_EQ(post("{\"created_at\": \"2024-05-01T13:45:00Z and then a long tail of text\"}"),
            "change 2: \"new\".\"created_at\" must be a timestamp like \"2024-05-01T13:45:00Z\", "
            "got \"2024-05-01T13:45:00Z and then a long tai...\"");
  // The old row is checked as the new one is.
  EXPECT_EQ(DecodeError(
                "{\"source\": \"posts\", \"old\": {\"user_id\": 7}, \"new\": " + PostRow(1) + "}"),
            "change 1: \"old\" has no column \"blog_id\", which counter blog_posts reads");
}

// ---- Numbers past what simdjson holds ---------------------------------------------------

// A cell of likes.post_id (int64, read by no counter) in a body of one change.
std::string PostId(std::string_view number) {
  return DecodeError(R"({"source": "likes", "new": {"post_id": )" + std::string(number) + "}}");
}

TEST(ChangeCellTest, IntegersPastInt64AreOutOfRangeWhateverTheirSize) {
  for (const std::string number :
       {"9223372036854775808", "18446744073709551615", "18446744073709551616",
        "99999999999999999999", "-9223372036854775809", "-99999999999999999999",
        "100000000000000000000000000000000000000"}) {
    EXPECT_EQ(PostId(number),
              "change 1: \"new\".\"post_id\" is out of the int64 range, got " + number);
  }
  // Cut after 40 bytes.
  EXPECT_EQ(PostId(std::string(1000, '9')),
            "change 1: \"new\".\"post_id\" is out of the int64 "
            "range, got " +
                std::string(40, '9') + "...");
  EXPECT_EQ(PostId("-" + std::string(1000, '1')),
            "change 1: \"new\".\"post_id\" is out of the "
            "int64 range, got -" +
                std::string(39, '1') + "...");
}

TEST(ChangeCellTest, FractionsAndExponentsAreRefusedAsWritten) {
  for (const std::string number : {"1e400", "-1E+400", "1e309", "1.5e99999999999", "1e-400", "0.0",
                                   "-0.0", "2E3", "123456789012345678901234567890.5", "1e+0"}) {
    EXPECT_EQ(PostId(number), "change 1: \"new\".\"post_id\" must be an int64, got " + number +
                                  " (a number with a fraction or an exponent)");
  }
}

TEST(ChangeCellTest, NumbersPastSimdjsonWhereAnotherTypeIsExpected) {
  // posts: title text (no counter), is_published bool and created_at timestamp (read).
  auto post = [](std::string_view column, std::string_view number) {
    return DecodeError("{\"source\": \"posts\", \"new\": " +
                       PostRow(1, ", \"" + std::string(column) + "\": " + std::string(number)) +
                       "}");
  };
  for (const std::string_view number : {"99999999999999999999", "-1e400", "1e-400", "7"}) {
    EXPECT_EQ(post("title", number), "change 1: \"new\".\"title\" must be a string, got a number");
    EXPECT_EQ(post("created_at", number),
              "change 1: \"new\".\"created_at\" must be a timestamp like \"2024-05-01T13:45:00Z\", "
              "got a number");
  }
  EXPECT_EQ(DecodeError("{\"source\": \"posts\", \"new\": {\"is_published\": 1e400}}"),
            "change 1: \"new\".\"is_published\" must be a bool (counter blog_posts reads it), "
            "got a number");
  // Outside rows: the place of a change's field, or of a change.
  EXPECT_EQ(DecodeError("{\"source\": 99999999999999999999, \"new\": {}}"),
            "change 1: \"source\" must be a string, got a number");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"id\": -1e999, \"new\": {}}"),
            "change 1: \"id\" must be a non-empty string, got a number");
  EXPECT_EQ(DecodeError("[{\"source\": \"likes\", \"new\": {}}, 1e400]"),
            "change 2: a change must be a JSON object, got a number");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": [99999999999999999999]}"),
            "change 1: \"new\" must be an object (a row) or null, got an array");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": {\"post_id\": [1e400]}}"),
            "change 1: \"new\".\"post_id\" must be an int64, got an array");
}

TEST(ChangeCellTest, NumbersPastSimdjsonInKeysThatAreNotColumnsAreIgnored) {
  ChangeDecoder decoder;
  const auto changes = MustDecode(
      decoder,
      R"({"source": "likes", "new": {"big": 99999999999999999999, "post_id": 5, "huge": 1e400,)"
      R"( "deep": {"x": [-1e999, 18446744073709551616, {"y": 1e-999}]}, "user_id": -6}})");
  ASSERT_EQ(changes.size(), 1U);
  EXPECT_EQ((*changes[0].new_row)[0].i, 5);
  EXPECT_EQ((*changes[0].new_row)[1].i, -6);
  EXPECT_TRUE((*changes[0].new_row)[2].is_null());
}

// The number a message shows is the refused cell's, among many numbers of many changes, in
// an array and in JSON lines, old rows and escaped keys included.
TEST(ChangeCellTest, TheRefusedNumberIsFoundByItsPlace) {
  const std::string like = R"({"source": "likes", "new": {"post_id": 1, "x": 1e999}})";
  const std::string bad =
      R"({"id": "c", "source": "likes", "old": {"x": 2e999, "post_id": 3e999, "user_id": 4},)"
      R"( "new": {"post_id": 5e999}})";
  const std::string expected =
      "change 3: \"old\".\"post_id\" must be an int64, got 3e999 (a number with a fraction or an "
      "exponent)";
  EXPECT_EQ(DecodeError("[" + like + ", " + like + ",\n" + bad + "]"), expected);
  EXPECT_EQ(DecodeError(like + "\n\n" + like + "  " + bad + "\n"), expected);
  EXPECT_EQ(DecodeError(like + "\n" +
                        R"({"source": "likes", "new": {"x": [1e999, 2e999],)"
                        R"( "user_id": 18446744073709551616, "post_id": 7e999}})"),
            "change 2: \"new\".\"user_id\" is out of the int64 range, got 18446744073709551616");
}

// ---- Numeric and float columns ----------------------------------------------------------

// A cell of orders.total (numeric(12,2), read by the counter revenue) as the decoder reads
// it: its units and scale ("units@scale"), or the error.
std::string Total(std::string_view json) {
  static const SourceSchema kSchema{"orders",
                                    {{"total", Type::kNumeric, 12, 2}, {"weight", Type::kFloat}}};
  static const SourceView kView{&kSchema, {"revenue", ""}};
  ChangeDecoder decoder;
  auto decoded =
      decoder.Decode(R"({"source": "orders", "new": {"total": )" + std::string(json) + "}}",
                     [](std::string_view name) { return name == "orders" ? &kView : nullptr; });
  if (!decoded) return decoded.error().message;
  const Value& cell = (*(*decoded)[0].new_row)[0];
  return cell.is_null() ? "NULL" : std::to_string(cell.i) + "@" + std::to_string(cell.scale);
}

TEST(ChangeCellTest, NumericCellsAreExactAtTheColumnsScale) {
  for (const auto& [json, read] : std::vector<std::pair<std::string_view, std::string_view>>{
           {R"("1234.50")", "123450@2"},
           {R"("-0.05")", "-5@2"},
           {R"("12")", "1200@2"},
           {R"(".5")", "50@2"},
           {R"("12.500")", "1250@2"},
           {"12", "1200@2"},
           {"-7", "-700@2"},
           {"0.1", "10@2"},
           {"1234.56", "123456@2"},
           {"1e2", "10000@2"},
           // A double of more than 15 significant digits: the body's spelling, exactly.
           {"1234567890123.45", "123456789012345@2"},
           {"92233720368547758.07", "9223372036854775807@2"},
           {"92233720368547758", "9223372036854775800@2"},
           {"null", "NULL"}}) {
    EXPECT_EQ(Total(json), read) << json;
  }
  const std::string refused =
      "change 1: \"new\".\"total\" must be a decimal with at most 2 digits after the point "
      "(counter revenue reads it), got ";
  EXPECT_EQ(Total(R"("1.005")"), refused + "\"1.005\" (has more than 2 digits after the point)");
  EXPECT_EQ(Total("1.005"), refused + "1.005 (has more than 2 digits after the point)");
  EXPECT_EQ(Total(R"("12a")"), refused + "\"12a\" (is not a decimal number)");
  EXPECT_EQ(Total(R"("")"), refused + "\"\" (is not a decimal number)");
  EXPECT_EQ(
      Total("92233720368547758.08"),
      refused + "92233720368547758.08 (is out of the range of numeric(…, 2) (at most 18 digits))");
  EXPECT_EQ(
      Total("99999999999999999999"),
      refused + "99999999999999999999 (is out of the range of numeric(…, 2) (at most 18 digits))");
  EXPECT_EQ(Total("1e400"), refused + "1e400 (is not a decimal number)");
  EXPECT_EQ(Total("true"),
            "change 1: \"new\".\"total\" must be a decimal like \"1234.50\" or 1234.5 (counter "
            "revenue reads it), got a boolean");
}

TEST(ChangeCellTest, AMaskedNumberIsNotReadAsZero) {
  // 1e400 beside the cell makes the decoder mask the body; a real 0.0 stays 0, the masked
  // number is read from its spelling.
  EXPECT_EQ(Total(R"(0.0, "x": 1e400)"), "0@2");
  EXPECT_EQ(Total(R"(123456789012345678901234567890, "x": 0)"),
            "change 1: \"new\".\"total\" must be a decimal with at most 2 digits after the point "
            "(counter revenue reads it), got 123456789012345678901234567890 (is out of the range "
            "of numeric(…, 2) (at most 18 digits))");
}

}  // namespace
}  // namespace tally::derived
