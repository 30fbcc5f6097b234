// Tests of the change decoder: every body form, every cell type, every error message
// exactly, a round trip of random rows, a large batch, and the decoding rate (logged).
#include "engine/derived/change_json.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/calendar.h"
#include "core/timestamp.h"
#include "core/timestamp_test_cases.h"
#include "engine/definitions/numeric.h"
#include "engine/definitions/test_util.h"

namespace tally::derived {
namespace {

using definitions::SourceSchema;
using definitions::Type;
using definitions::Value;
namespace posts = definitions::testing;

// The blog posts source (definitions/test_util.h), with the counters blog_posts and
// author_rating reading some columns.
const SourceView& PostsView() {
  static const SourceView kView{
      &posts::PostsSchema(),
      {"", "blog_posts", "blog_posts", "author_rating", "blog_posts", "blog_posts", "", "", ""}};
  return kView;
}

// likes: nothing reads its columns.
const SourceView& LikesView() {
  static const SourceSchema kSchema{
      "likes", {{"post_id", Type::kInt64}, {"user_id", Type::kInt64}, {"at", Type::kTimestamp}}};
  static const SourceView kView{&kSchema, {"", "", ""}};
  return kView;
}

const SourceView* Lookup(std::string_view name) {
  if (name == "posts") return &PostsView();
  if (name == "likes") return &LikesView();
  return nullptr;
}

// Decodes and expects success.
std::span<const DecodedChange> MustDecode(ChangeDecoder& decoder, std::string_view body) {
  auto decoded = decoder.Decode(body, Lookup);
  EXPECT_TRUE(decoded) << body << "\n" << decoded.error().message;
  return decoded ? *decoded : std::span<const DecodedChange>();
}

// The message of a failed decode ("" when it succeeded).
std::string DecodeError(std::string_view body) {
  ChangeDecoder decoder;
  auto decoded = decoder.Decode(body, Lookup);
  if (decoded) return "";
  EXPECT_EQ(decoded.error().code, ErrorCode::kInvalidArgument);
  return decoded.error().message;
}

// A posts row as JSON with the columns blog_posts and author_rating need, and `extra`.
std::string PostRow(int64_t user, std::string_view extra = "") {
  return "{\"user_id\": " + std::to_string(user) +
         ", \"blog_id\": 3, \"rating\": 5, \"is_published\": true, \"is_deleted\": false" +
         std::string(extra) + "}";
}

// prefix followed by n in decimal ("c" + std::to_string(n) trips GCC 12's -Wrestrict).
std::string Numbered(std::string_view prefix, size_t n) {
  std::string out(prefix);
  out += std::to_string(n);
  return out;
}

// ---- Accepted forms --------------------------------------------------------------------

TEST(ChangeDecoderTest, OneInsertWithEveryType) {
  ChangeDecoder decoder;
  const auto changes = MustDecode(decoder, R"({"source": "posts", "id": "c-17", "new": {
      "id": 42, "user_id": 7, "blog_id": 3, "rating": -5, "is_published": true,
      "is_deleted": false, "created_at": "2024-05-01T13:45:00.25Z", "title": "caf\u00e9 \"x\"\n",
      "status": null}})");
  ASSERT_EQ(changes.size(), 1U);
  const DecodedChange& change = changes[0];
  EXPECT_EQ(change.source, &PostsView());
  EXPECT_EQ(change.id, "c-17");
  EXPECT_FALSE(change.old_row);
  ASSERT_TRUE(change.new_row);
  const std::vector<Value>& row = *change.new_row;
  ASSERT_EQ(row.size(), static_cast<size_t>(posts::kPostColumns));
  EXPECT_EQ(row[posts::kId].type, Type::kInt64);
  EXPECT_EQ(row[posts::kId].i, 42);
  EXPECT_EQ(row[posts::kUserId].i, 7);
  EXPECT_EQ(row[posts::kRating].i, -5);
  EXPECT_EQ(row[posts::kIsPublished].type, Type::kBool);
  EXPECT_EQ(row[posts::kIsPublished].i, 1);
  EXPECT_EQ(row[posts::kIsDeleted].i, 0);
  EXPECT_EQ(row[posts::kCreatedAt].type, Type::kTimestamp);
  EXPECT_EQ(row[posts::kCreatedAt].i, MicrosFromCivil(2024, 5, 1, 13, 45, 0, 250000));
  EXPECT_EQ(row[posts::kTitle].type, Type::kText);
  EXPECT_EQ(row[posts::kTitle].s, "caf\xc3\xa9 \"x\"\n");
  EXPECT_TRUE(row[posts::kStatus].is_null());
}

TEST(ChangeDecoderTest, UpdateDeleteAndNullRows) {
  ChangeDecoder decoder;
  const std::string body =
      "[{\"source\": \"posts\", \"old\": " + PostRow(1) + ", \"new\": " + PostRow(2) +
      "}, {\"source\": \"posts\", \"old\": " + PostRow(3) + "}, {\"new\": " + PostRow(4) +
      ", \"old\": null, \"source\": \"posts\"}, {\"source\": \"posts\", "
      "\"old\": " +
      PostRow(5) + ", \"new\": null}]";
  const auto changes = MustDecode(decoder, body);
  ASSERT_EQ(changes.size(), 4U);
  EXPECT_EQ(changes[0].id, "");
  EXPECT_EQ((*changes[0].old_row)[posts::kUserId].i, 1);
  EXPECT_EQ((*changes[0].new_row)[posts::kUserId].i, 2);
  EXPECT_EQ((*changes[1].old_row)[posts::kUserId].i, 3);
  EXPECT_FALSE(changes[1].new_row);
  EXPECT_FALSE(changes[2].old_row);
  EXPECT_EQ((*changes[2].new_row)[posts::kUserId].i, 4);
  EXPECT_EQ((*changes[3].old_row)[posts::kUserId].i, 5);
  EXPECT_FALSE(changes[3].new_row);
}

TEST(ChangeDecoderTest, BodyForms) {
  ChangeDecoder decoder;
  const std::string a = "{\"source\": \"likes\", \"new\": {\"post_id\": 1}}";
  const std::string b = "{\"source\": \"likes\", \"new\": {\"post_id\": 2}}";
  auto first_ids = [&](std::string_view body) {
    std::vector<int64_t> ids;
    for (const DecodedChange& change : MustDecode(decoder, body)) {
      ids.push_back((*change.new_row)[0].i);
    }
    return ids;
  };
  using Ids = std::vector<int64_t>;
  EXPECT_EQ(first_ids(a), Ids({1}));
  EXPECT_EQ(first_ids("  \n" + a + "\n\n"), Ids({1}));
  EXPECT_EQ(first_ids("[" + a + "," + b + "]"), Ids({1, 2}));
  EXPECT_EQ(first_ids(" [ " + a + " ,\n " + b + " ] \n"), Ids({1, 2}));
  EXPECT_EQ(first_ids("[]"), Ids());
  // JSON lines: blank lines, CRLF, and values on one line or spread over several.
  EXPECT_EQ(first_ids(a + "\n" + b + "\n"), Ids({1, 2}));
  EXPECT_EQ(first_ids(a + "\r\n\r\n\n" + b), Ids({1, 2}));
  EXPECT_EQ(first_ids(a + " " + b + "\t" + a), Ids({1, 2, 1}));
  EXPECT_EQ(first_ids("{\n  \"source\": \"likes\",\n  \"new\": {\"post_id\": 7}\n}\n{\"source\":"
                      "\n\"likes\", \"new\": {\"post_id\": 8}}"),
            Ids({7, 8}));
}

TEST(ChangeDecoderTest, ColumnsOutsideTheSchemaAreIgnoredAndUnreadOnesMayBeAbsent) {
  ChangeDecoder decoder;
  const auto changes =
      MustDecode(decoder, "{\"source\": \"posts\", \"new\": " +
                              PostRow(7, ", \"extra\": [1, {\"x\": null}], \"more\": \"y\"") + "}");
  ASSERT_EQ(changes.size(), 1U);
  const std::vector<Value>& row = *changes[0].new_row;
  EXPECT_TRUE(row[posts::kId].is_null());
  EXPECT_TRUE(row[posts::kTitle].is_null());
  EXPECT_TRUE(row[posts::kCreatedAt].is_null());
  EXPECT_EQ(row[posts::kUserId].i, 7);
}

TEST(ChangeDecoderTest, ColumnsInAnyOrderAndWideSchemas) {
  // 40 columns: names are found through the decoder's map rather than a scan.
  SourceSchema wide{"wide", {}};
  for (int i = 0; i < 40; ++i)
    wide.columns.push_back({Numbered("c", static_cast<size_t>(i)), Type::kInt64});
  const SourceView view{&wide, std::vector<std::string>(40, "w")};
  std::vector<int> order(40);
  for (int i = 0; i < 40; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937 rng(7);
  ChangeDecoder decoder;
  for (int round = 0; round < 20; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    std::string body = "{\"source\": \"wide\", \"new\": {";
    for (size_t i = 0; i < order.size(); ++i) {
      body += i > 0 ? ", \"c" : "\"c";
      body += std::to_string(order[i]) + "\": " + std::to_string(order[i] * 10);
    }
    body += "}}";
    auto decoded = decoder.Decode(body, [&](std::string_view) { return &view; });
    ASSERT_TRUE(decoded) << decoded.error().message;
    for (int i = 0; i < 40; ++i)
      EXPECT_EQ((*(*decoded)[0].new_row)[static_cast<size_t>(i)].i, i * 10);
  }
}

TEST(ChangeDecoderTest, SeveralSources) {
  ChangeDecoder decoder;
  const std::string like = "{\"source\": \"likes\", \"new\": {\"post_id\": 1, \"user_id\": 2}}";
  const std::string post = "{\"source\": \"posts\", \"new\": " + PostRow(3) + "}";
  const auto changes = MustDecode(decoder, like + "\n" + post + "\n" + like + "\n" + post);
  ASSERT_EQ(changes.size(), 4U);
  EXPECT_EQ(changes[0].source, &LikesView());
  EXPECT_EQ(changes[1].source, &PostsView());
  EXPECT_EQ(changes[2].source, &LikesView());
  EXPECT_EQ(changes[3].source, &PostsView());
  EXPECT_EQ(changes[2].new_row->size(), 3U);
  EXPECT_EQ(changes[3].new_row->size(), static_cast<size_t>(posts::kPostColumns));
}

TEST(ChangeDecoderTest, Integers) {
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
TEST(ChangeDecoderTest, Timestamps) {
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

// ---- Errors ----------------------------------------------------------------------------

TEST(ChangeDecoderTest, BodyErrors) {
  EXPECT_EQ(DecodeError(""),
            "empty body: send a change object, a JSON array of changes or JSON lines");
  EXPECT_EQ(DecodeError(" \n\t\r\n"),
            "empty body: send a change object, a JSON array of changes or JSON lines");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\",}"),
            "invalid JSON: The JSON document has an improper structure: missing or superfluous "
            "commas, braces, missing keys, etc near byte 19");
  EXPECT_EQ(DecodeError("{\"source\": tru}"),
            "invalid JSON: Problem while parsing an atom starting with the letter 't' near byte "
            "11");
  EXPECT_EQ(DecodeError("{\"source\": \"likes}"),
            "invalid JSON: A string is opened, but never closed near byte 11");
  EXPECT_EQ(DecodeError("{\"source\": \"lik\xff\"}"),
            "invalid JSON: The input is not valid UTF-8 near byte 15");
  EXPECT_EQ(DecodeError("{\"source\": \"a\tb\"}"),
            "invalid JSON: Within strings, some characters must be escaped, we found unescaped "
            "characters near byte 13");
  EXPECT_EQ(DecodeError("{\"source\": \"a\\qb\"}"),
            "invalid JSON: Problem while parsing a string near byte 13");
  EXPECT_EQ(DecodeError("{\"source\": \"\\ud800\"}"),
            "invalid JSON: Problem while parsing a string near byte 12");
  EXPECT_EQ(DecodeError("[{\"source\": \"likes\", \"new\": {\"post_id\": 01}}]"),
            "invalid JSON: Problem while parsing a number near byte 40");
  EXPECT_EQ(DecodeError("{\"new\": {\"post_id\": 1e400}}"),
            "invalid JSON: Problem while parsing a number near byte 20");
  EXPECT_EQ(DecodeError("{\"new\": {\"post_id\": -9223372036854775809}}"),
            "invalid JSON: Problem while parsing a number near byte 20");
  EXPECT_EQ(DecodeError("{\"new\": {\"post_id\": 18446744073709551616}}"),
            "invalid JSON: Problem while parsing a number near byte 20");
  EXPECT_EQ(DecodeError("[{\"source\": \"likes\"}"),
            "invalid JSON: The JSON document has an improper structure: missing or superfluous "
            "commas, braces, missing keys, etc near byte 20");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": {\"post_id\": 1}}\n{\"source\": "),
            "invalid JSON: The JSON document has an improper structure: missing or superfluous "
            "commas, braces, missing keys, etc near byte 54");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": {\"post_id\": 1}} x"),
            "invalid JSON: The JSON document has an improper structure: missing or superfluous "
            "commas, braces, missing keys, etc near byte 43");
  EXPECT_EQ(DecodeError(std::string(1025, '[') + std::string(1025, ']')),
            "invalid JSON: The JSON document was too deep (too many nested objects and arrays) "
            "near byte 1024");
  // Invalid JSON anywhere fails the body, in a column nobody reads too.
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": {\"post_id\": 1, \"x\": [1,,2]}}"),
            "invalid JSON: The JSON document has an improper structure: missing or superfluous "
            "commas, braces, missing keys, etc near byte 50");
  EXPECT_EQ(DecodeError("[{\"source\": \"likes\", \"new\": {\"post_id\": 1}}]\n[]"),
            "a JSON array of changes must be the whole body, but more JSON follows at byte 45");
}

TEST(ChangeDecoderTest, ChangeErrors) {
  const std::string like = "{\"source\": \"likes\", \"new\": {\"post_id\": 1}}";
  EXPECT_EQ(DecodeError("[" + like + ", 5]"),
            "change 2: a change must be a JSON object, got a number");
  EXPECT_EQ(DecodeError("[" + like + ", " + like + ", [" + like + "]]"),
            "change 3: a change must be a JSON object, got an array");
  EXPECT_EQ(DecodeError(like + "\n\"x\"\n"),
            "change 2: a change must be a JSON object, got a string");
  EXPECT_EQ(DecodeError(like + "\n" + like + "\n[]"),
            "change 3: a change must be a JSON object, got an array");
  EXPECT_EQ(DecodeError("null"), "change 1: a change must be a JSON object, got null");
  EXPECT_EQ(DecodeError("true"), "change 1: a change must be a JSON object, got a boolean");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"Id\": \"x\", \"new\": {}}"),
            "change 1: unknown key \"Id\": a change has \"source\", \"id\", \"old\" and \"new\"");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": {}, \"new\": {}}"),
            "change 1: duplicate key \"new\"");
  EXPECT_EQ(DecodeError("{\"new\": {\"post_id\": 1}}"), "change 1: missing \"source\"");
  EXPECT_EQ(DecodeError("{\"source\": 7, \"new\": {}}"),
            "change 1: \"source\" must be a string, got a number");
  EXPECT_EQ(DecodeError("{\"source\": null, \"new\": {}}"),
            "change 1: \"source\" must be a string, got null");
  EXPECT_EQ(DecodeError(like + "\n{\"source\": \"postz\", \"new\": {}}"),
            "change 2: unknown source \"postz\"");
  EXPECT_EQ(DecodeError("{\"source\": \"" + std::string(100, 'a') + "\", \"new\": {}}"),
            "change 1: unknown source \"" + std::string(40, 'a') + "...\"");
  // Cut at a character boundary: 39 bytes of "a", then "é" would end at byte 41.
  EXPECT_EQ(DecodeError("{\"source\": \"" + std::string(39, 'a') + "\xc3\xa9zzz\", \"new\": {}}"),
            "change 1: unknown source \"" + std::string(39, 'a') + "...\"");
  EXPECT_EQ(DecodeError("{\"source\": \"a\\\"b\\n\\u0001\", \"new\": {}}"),
            "change 1: unknown source \"a\\\"b\\n\\u0001\"");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"id\": 17, \"new\": {}}"),
            "change 1: \"id\" must be a non-empty string, got a number");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"id\": null, \"new\": {}}"),
            "change 1: \"id\" must be a non-empty string, got null");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"id\": \"\", \"new\": {}}"),
            "change 1: \"id\" must be a non-empty string, got \"\"");
  const std::string neither =
      "change 1: a change needs \"old\" (before an update or delete), \"new\" (after an insert "
      "or update) or both";
  EXPECT_EQ(DecodeError("{\"source\": \"likes\"}"), neither);
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"old\": null, \"new\": null}"), neither);
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": [1]}"),
            "change 1: \"new\" must be an object (a row) or null, got an array");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"old\": \"x\", \"new\": {}}"),
            "change 1: \"old\" must be an object (a row) or null, got a string");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": {\"post_id\": 1, \"post_id\": 2}}"),
            "change 1: \"new\".\"post_id\" appears twice");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": {\"x\": 1, \"post_id\": 2, \"x\": 3}}"),
            "change 1: \"new\".\"x\" appears twice");
}

TEST(ChangeDecoderTest, CellErrors) {
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
            "change 2: \"new\".\"rating\" must be an int64 (counter author_rating reads it), got "
            "18446744073709551615, which is out of the int64 range");
  EXPECT_EQ(post("{\"user_id\": 7, \"blog_id\": 3, \"rating\": 9223372036854775808}"),
            "change 2: \"new\".\"rating\" must be an int64 (counter author_rating reads it), got "
            "9223372036854775808, which is out of the int64 range");
  EXPECT_EQ(post("{\"user_id\": 1.5}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "1.5 (a number with a fraction or an exponent)");
  EXPECT_EQ(post("{\"user_id\": 1e3}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "1000.0 (a number with a fraction or an exponent)");
  EXPECT_EQ(post("{\"user_id\": -2.0}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "-2.0 (a number with a fraction or an exponent)");
  EXPECT_EQ(post("{\"user_id\": 1e21}"),
            "change 2: \"new\".\"user_id\" must be an int64 (counter blog_posts reads it), got "
            "1e+21 (a number with a fraction or an exponent)");
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

// ---- Reuse, round trip, volume ---------------------------------------------------------

TEST(ChangeDecoderTest, ReuseReplacesThePreviousResult) {
  ChangeDecoder decoder;
  std::string big = "[";
  for (int i = 0; i < 1000; ++i) {
    if (i > 0) big += ",";
    big += "{\"source\": \"posts\", \"id\": \"i" + std::to_string(i) +
           "\", \"old\": " + PostRow(i) +
           ", \"new\": " + PostRow(i + 1, ", \"title\": \"t" + std::to_string(i) + "\"") + "}";
  }
  big += "]";
  for (int round = 0; round < 3; ++round) {
    auto changes = MustDecode(decoder, big);
    ASSERT_EQ(changes.size(), 1000U);
    for (size_t i = 0; i < changes.size(); ++i) {
      EXPECT_EQ(changes[i].id, Numbered("i", i));
      EXPECT_EQ((*changes[i].old_row)[posts::kUserId].i, static_cast<int64_t>(i));
      EXPECT_EQ((*changes[i].new_row)[posts::kTitle].s, Numbered("t", i));
    }
    changes = MustDecode(decoder, "{\"source\": \"likes\", \"old\": {\"post_id\": 9}}");
    ASSERT_EQ(changes.size(), 1U);
    EXPECT_FALSE(changes[0].new_row);
    EXPECT_EQ((*changes[0].old_row)[0].i, 9);
    // A failed decode leaves nothing behind for the next one.
    EXPECT_FALSE(decoder.Decode(big.substr(0, big.size() - 1), Lookup));
  }
}

// A row of random cells for `schema` (NULL about one time in eight).
std::vector<Value> RandomRow(const SourceSchema& schema, std::mt19937_64& rng,
                             std::deque<std::string>& texts) {
  static constexpr std::string_view kPieces[] = {"a",
                                                 "Z",
                                                 " ",
                                                 "\"",
                                                 "\\",
                                                 "/",
                                                 "\n",
                                                 "\t",
                                                 "\x01",
                                                 "\x7f",
                                                 "\xc3\xa9",
                                                 "\xe2\x82\xac",
                                                 "\xf0\x9f\x98\x80",
                                                 ":",
                                                 "{",
                                                 "]",
                                                 "\\N"};
  std::vector<Value> row;
  for (const SourceSchema::Column& column : schema.columns) {
    if (rng() % 8 == 0) {
      row.push_back(Value::Null());
      continue;
    }
    switch (column.type) {
      case Type::kInt64: {
        const uint64_t bits = rng();
        row.push_back(Value::Int(static_cast<int64_t>(rng() % 2 ? bits : bits % 1000) *
                                 (rng() % 2 ? 1 : -1)));
        break;
      }
      case Type::kBool:
        row.push_back(Value::Bool(rng() % 2 == 0));
        break;
      case Type::kText: {
        std::string text;
        for (size_t n = rng() % 12; n > 0; --n) text += kPieces[rng() % std::size(kPieces)];
        texts.push_back(text);
        row.push_back(Value::Text(texts.back()));
        break;
      }
      case Type::kTimestamp: {
        const int64_t low = MicrosFromCivil(1, 1, 1);
        const int64_t high = MicrosFromCivil(9999, 12, 31, 23, 59, 59, 999999);
        int64_t micros = low + static_cast<int64_t>(rng() % static_cast<uint64_t>(high - low));
        if (rng() % 2 == 0) micros -= micros % kMicrosPerSecond;
        row.push_back(Value::Timestamp(micros));
        break;
      }
      case Type::kNumeric: {
        // Up to 15 significant digits, so that a JSON number keeps it exactly too.
        const auto units = static_cast<int64_t>(rng() % 1'000'000'000'000'000);
        row.push_back(Value::Numeric(rng() % 2 ? units : -units, column.scale));
        break;
      }
      case Type::kFloat:
        row.push_back(
            Value::Float(static_cast<double>(static_cast<int64_t>(rng() % 4001) - 2000) / 8));
        break;
      case Type::kNull:
        row.push_back(Value::Null());
    }
  }
  return row;
}

// `text` as a JSON string, escaping what JSON must and, at random, what it may.
std::string JsonString(std::string_view text, std::mt19937_64& rng) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || (byte < 0x80 && rng() % 4 == 0)) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A timestamp in one of the accepted spellings, with a random offset at times.
std::string JsonTimestamp(int64_t micros, std::mt19937_64& rng) {
  int64_t offset_minutes = 0;
  if (rng() % 2 == 0) offset_minutes = static_cast<int64_t>(rng() % (2 * 15 * 60 + 1)) - 15 * 60;
  const int64_t local = micros + offset_minutes * kMicrosPerMinute;
  const int64_t days = FloorDiv(local, kMicrosPerDay);
  const int64_t in_day = local - days * kMicrosPerDay;
  const CivilDate date = CivilFromDays(days);
  const int64_t seconds = in_day / kMicrosPerSecond;
  char text[64];
  int length = std::snprintf(text, sizeof text, "%04lld-%02d-%02d%c%02lld:%02lld:%02lld",
                             static_cast<long long>(date.year), date.month, date.day,
                             rng() % 2 ? 'T' : ' ', static_cast<long long>(seconds / 3600),
                             static_cast<long long>(seconds / 60 % 60),
                             static_cast<long long>(seconds % 60));
  std::string out(text, static_cast<size_t>(length));
  if (in_day % kMicrosPerSecond != 0) {
    length = std::snprintf(text, sizeof text, ".%06lld",
                           static_cast<long long>(in_day % kMicrosPerSecond));
    out.append(text, static_cast<size_t>(length));
  }
  if (offset_minutes == 0) {
    if (rng() % 2 == 0) out += "Z";
  } else {
    const int64_t magnitude = offset_minutes < 0 ? -offset_minutes : offset_minutes;
    length = std::snprintf(text, sizeof text, "%c%02lld:%02lld", offset_minutes < 0 ? '-' : '+',
                           static_cast<long long>(magnitude / 60),
                           static_cast<long long>(magnitude % 60));
    out.append(text, static_cast<size_t>(length));
  }
  return out;
}

// `row` as a JSON object, columns in a random order, with an unknown column at times.
std::string JsonRow(const SourceSchema& schema, const std::vector<Value>& row,
                    std::mt19937_64& rng) {
  std::vector<size_t> order(row.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (rng() % 2 == 0) std::shuffle(order.begin(), order.end(), rng);
  std::string out = "{";
  for (size_t i : order) {
    if (out.size() > 1) out += ", ";
    const Value& cell = row[i];
    out += "\"" + schema.columns[i].name + "\": ";
    switch (cell.type) {
      case Type::kNull:
        out += "null";
        break;
      case Type::kInt64:
        out += std::to_string(cell.i);
        break;
      case Type::kBool:
        out += cell.i != 0 ? "true" : "false";
        break;
      case Type::kText:
        out += JsonString(cell.s, rng);
        break;
      case Type::kTimestamp:
        out += "\"" + JsonTimestamp(cell.i, rng) + "\"";
        break;
      case Type::kNumeric: {
        // A string or a JSON number, both exact.
        const std::string text = definitions::FormatDecimal(cell.i, cell.scale);
        out += rng() % 2 ? "\"" + text + "\"" : text;
        break;
      }
      case Type::kFloat:
        out += fmt::format("{}", cell.float_value());
        break;
    }
  }
  if (rng() % 4 == 0) out += ", \"not_a_column\": {\"deep\": [1, \"x\", null]}";
  return out + "}";
}

void ExpectSameRow(const std::vector<Value>& expected, const std::vector<Value>& actual,
                   size_t change) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(actual[i].type, expected[i].type) << "change " << change << " column " << i;
    ASSERT_EQ(actual[i].scale, expected[i].scale) << "change " << change << " column " << i;
    if (expected[i].type == Type::kText) {
      ASSERT_EQ(actual[i].s, expected[i].s) << "change " << change << " column " << i;
    } else {
      ASSERT_EQ(actual[i].i, expected[i].i) << "change " << change << " column " << i;
    }
  }
}

TEST(ChangeDecoderTest, RandomRowsRoundTrip) {
  static const SourceSchema kSchema{"mixed",
                                    {{"a", Type::kInt64},
                                     {"b", Type::kBool},
                                     {"c", Type::kText},
                                     {"d", Type::kTimestamp},
                                     {"e", Type::kText},
                                     {"f", Type::kInt64},
                                     {"g", Type::kTimestamp},
                                     {"h", Type::kNumeric, 12, 2},
                                     {"i", Type::kFloat}}};
  const SourceView view{&kSchema, std::vector<std::string>(kSchema.columns.size())};
  const SourceLookup lookup = [&](std::string_view name) {
    return name == "mixed" ? &view : nullptr;
  };
  std::mt19937_64 rng(2024);
  ChangeDecoder decoder;
  for (int body_number = 0; body_number < 40; ++body_number) {
    std::deque<std::string> texts;
    struct Expected {
      std::string id;
      std::optional<std::vector<Value>> old_row, new_row;
    };
    std::vector<Expected> expected;
    const bool lines = body_number % 2 == 1;
    std::string body = lines ? "" : "[";
    for (size_t n = 1 + rng() % 300; n > 0; --n) {
      Expected change;
      const int kind = static_cast<int>(rng() % 3);  // insert, update, delete
      if (kind != 0) change.old_row = RandomRow(kSchema, rng, texts);
      if (kind != 2) change.new_row = RandomRow(kSchema, rng, texts);
      if (rng() % 2 == 0) change.id = "id-" + std::to_string(rng());
      std::string json = "{\"source\": \"mixed\"";
      if (!change.id.empty()) json += ", \"id\": " + JsonString(change.id, rng);
      if (change.old_row) json += ", \"old\": " + JsonRow(kSchema, *change.old_row, rng);
      if (change.new_row) json += ", \"new\": " + JsonRow(kSchema, *change.new_row, rng);
      json += "}";
      if (!expected.empty()) body += lines ? "\n" : ",\n";
      body += json;
      expected.push_back(std::move(change));
    }
    if (!lines) body += "]";
    auto decoded = decoder.Decode(body, lookup);
    ASSERT_TRUE(decoded) << decoded.error().message;
    ASSERT_EQ(decoded->size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const DecodedChange& change = (*decoded)[i];
      EXPECT_EQ(change.source, &view);
      EXPECT_EQ(change.id, expected[i].id);
      ASSERT_EQ(change.old_row.has_value(), expected[i].old_row.has_value());
      ASSERT_EQ(change.new_row.has_value(), expected[i].new_row.has_value());
      if (change.old_row) ExpectSameRow(*expected[i].old_row, *change.old_row, i + 1);
      if (change.new_row) ExpectSameRow(*expected[i].new_row, *change.new_row, i + 1);
    }
  }
}

// A body of `count` posts updates, as an array or as JSON lines.
std::string PostsBody(size_t count, bool lines) {
  std::string body = lines ? "" : "[";
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) body += lines ? "\n" : ",\n";
    const std::string n = std::to_string(i);
    body += "{\"source\":\"posts\",\"id\":\"c-" + n + "\",\"old\":{\"id\":" + n +
            ",\"user_id\":" + std::to_string(i % 1000) +
            ",\"blog_id\":3,\"rating\":4,\"is_published\":false,\"is_deleted\":false,"
            "\"created_at\":\"2024-05-01T12:00:00Z\",\"title\":\"post " +
            n + "\"},\"new\":{\"id\":" + n + ",\"user_id\":" + std::to_string(i % 1000) +
            ",\"blog_id\":3,\"rating\":5,\"is_published\":true,\"is_deleted\":false,"
            "\"created_at\":\"2024-05-01T12:00:00.5Z\",\"title\":\"post " +
            n + "\"}}";
  }
  if (!lines) body += "]";
  return body;
}

TEST(ChangeDecoderTest, LargeBatchDecodesEveryChange) {
  constexpr size_t kChanges = 100'000;
  ChangeDecoder decoder;
  for (const bool lines : {false, true}) {
    const std::string body = PostsBody(kChanges, lines);
    const auto changes = MustDecode(decoder, body);
    ASSERT_EQ(changes.size(), kChanges);
    for (size_t i = 0; i < kChanges; ++i) {
      const DecodedChange& change = changes[i];
      const std::string n = std::to_string(i);
      ASSERT_EQ(change.id, "c-" + n);
      const std::vector<Value>& old_row = *change.old_row;
      const std::vector<Value>& new_row = *change.new_row;
      ASSERT_EQ(old_row[posts::kId].i, static_cast<int64_t>(i));
      ASSERT_EQ(new_row[posts::kUserId].i, static_cast<int64_t>(i % 1000));
      ASSERT_EQ(old_row[posts::kRating].i, 4);
      ASSERT_EQ(new_row[posts::kRating].i, 5);
      ASSERT_EQ(old_row[posts::kIsPublished].i, 0);
      ASSERT_EQ(new_row[posts::kIsPublished].i, 1);
      ASSERT_EQ(new_row[posts::kCreatedAt].i, MicrosFromCivil(2024, 5, 1, 12, 0, 0, 500000));
      ASSERT_EQ(new_row[posts::kTitle].s, "post " + n);
      ASSERT_TRUE(new_row[posts::kStatus].is_null());
    }
  }
}

// A body of `count` likes inserts (small changes: one row of three cells), as an array or
// as JSON lines.
std::string LikesBody(size_t count, bool lines) {
  std::string body = lines ? "" : "[";
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) body += lines ? "\n" : ",\n";
    body += "{\"source\":\"likes\",\"id\":\"l-" + std::to_string(i) +
            "\",\"new\":{\"post_id\":" + std::to_string(i % 5000) +
            ",\"user_id\":" + std::to_string(i) + ",\"at\":\"2024-05-01T12:34:56Z\"}}";
  }
  if (!lines) body += "]";
  return body;
}

// Not a benchmark with a bar to pass (tests never depend on timing): the rate is logged.
TEST(ChangeDecoderTest, DecodingRate) {
  ChangeDecoder decoder;
  struct Case {
    const char* what;
    size_t count;
    bool lines;
  };
  for (const Case& c : {Case{"likes inserts", 100'000, false}, Case{"likes inserts", 100'000, true},
                        Case{"likes inserts", 1, false}, Case{"posts updates", 100'000, false},
                        Case{"posts updates", 100'000, true}, Case{"posts updates", 1, false}}) {
    const size_t count = c.count;
    const bool lines = c.lines;
    const std::string body = std::string_view(c.what) == "likes inserts" ? LikesBody(count, lines)
                                                                         : PostsBody(count, lines);
    const int rounds = count == 1 ? 200'000 : 5;
    double best = 1e300;
    for (int round = 0; round < 5; ++round) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < rounds / 5 + 1; ++i) ASSERT_TRUE(decoder.Decode(body, Lookup));
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      best = std::min(best, elapsed.count() / (rounds / 5 + 1));
    }
    std::printf(
        "[ rate     ] %s, %zu per body, %s, %zu bytes each: %.2f M changes/s, "
        "%.0f MB/s\n",
        c.what, count, lines ? "JSON lines" : "array", body.size() / count,
        static_cast<double>(count) / best / 1e6, static_cast<double>(body.size()) / best / 1e6);
  }
}

// Random byte edits of valid bodies: each decodes or fails with one of the documented
// messages, never crashes (run under ASan/UBSan too); and where simdjson refuses the JSON,
// the scanner finds the byte.
TEST(ChangeDecoderTest, MutatedBodiesFailCleanly) {
  const std::vector<std::string> seeds = {
      LikesBody(3, false), LikesBody(3, true), PostsBody(2, false),
      "{\"source\": \"posts\", \"id\": \"x\", \"new\": " +
          PostRow(1, ", \"title\": \"caf\\u00e9 \\ud83d\\ude00\", \"n\": -1.5e3") + "}"};
  static constexpr std::string_view kAlphabet[] = {
      "{",          "}",      "[",       "]",       ",",      ":",    "\"",   "\\",
      "\\u",        "d800",   " ",       "\n",      "0",      "-",    "1e9",  "9223372036854775808",
      "true",       "null",   "\"new\"", "\"old\"", "\"id\"", "\xff", "\xc3", "\x01",
      "2024-02-30", "T25:00", "+16:00",  "."};
  std::mt19937_64 rng(99);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  ChangeDecoder decoder;
  int decoded = 0;
  int unlocated = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body = seeds[pick(seeds.size())];
    for (size_t edits = 1 + pick(3); edits > 0; --edits) {
      const size_t at = pick(body.size() + 1);
      switch (pick(3)) {
        case 0:
          body.erase(at, pick(6));
          break;
        case 1:
          body.insert(at, kAlphabet[pick(std::size(kAlphabet))]);
          break;
        default:
          body.replace(at, pick(3), kAlphabet[pick(std::size(kAlphabet))]);
          break;
      }
    }
    auto result = decoder.Decode(body, Lookup);
    if (result) {
      ++decoded;
      for (const DecodedChange& change : *result) {
        ASSERT_TRUE(change.old_row || change.new_row);
        for (const auto* row : {&change.old_row, &change.new_row}) {
          if (*row) {
            ASSERT_EQ((*row)->size(), change.source->schema->columns.size());
          }
        }
      }
      continue;
    }
    const std::string& message = result.error().message;
    const bool known = message.rfind("change ", 0) == 0 ||
                       message.rfind("invalid JSON: ", 0) == 0 ||
                       message.rfind("empty body: ", 0) == 0 ||
                       message.rfind("a JSON array of changes must be the whole body", 0) == 0;
    ASSERT_TRUE(known) << body << "\n" << message;
    if (message.rfind("invalid JSON: ", 0) == 0 &&
        message.find(" near byte ") == std::string::npos) {
      ++unlocated;
      ADD_FAILURE() << "no location: " << message << "\n" << body;
    }
  }
  EXPECT_GT(decoded, 100);
  EXPECT_EQ(unlocated, 0);
}

// ---- ParseKeyPart ----------------------------------------------------------------------

TEST(ParseKeyPartTest, EveryType) {
  auto part = [](Type type, std::string_view text) -> std::string {
    auto value = ParseKeyPart(type, text);
    if (!value) return "error: " + value.error().message;
    return definitions::DebugString(*value);
  };
  EXPECT_EQ(part(Type::kInt64, "42"), "42");
  EXPECT_EQ(part(Type::kInt64, "-7"), "-7");
  EXPECT_EQ(part(Type::kInt64, "007"), "7");
  EXPECT_EQ(part(Type::kInt64, "9223372036854775807"), "9223372036854775807");
  EXPECT_EQ(part(Type::kInt64, "-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(part(Type::kInt64, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kInt64, "9223372036854775808"),
            "error: \"9223372036854775808\" is out of the int64 range");
  EXPECT_EQ(part(Type::kInt64, ""), "error: \"\" is not an int64");
  EXPECT_EQ(part(Type::kInt64, "+1"), "error: \"+1\" is not an int64");
  EXPECT_EQ(part(Type::kInt64, "1.0"), "error: \"1.0\" is not an int64");
  EXPECT_EQ(part(Type::kInt64, " 1"), "error: \" 1\" is not an int64");
  EXPECT_EQ(part(Type::kInt64, "-"), "error: \"-\" is not an int64");
  EXPECT_EQ(part(Type::kBool, "true"), "true");
  EXPECT_EQ(part(Type::kBool, "false"), "false");
  EXPECT_EQ(part(Type::kBool, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kBool, "TRUE"), "error: \"TRUE\" is not a bool (true or false)");
  EXPECT_EQ(part(Type::kBool, "1"), "error: \"1\" is not a bool (true or false)");
  EXPECT_EQ(part(Type::kText, "a:b\\c"), "'a:b\\c'");
  EXPECT_EQ(part(Type::kText, ""), "''");
  EXPECT_EQ(part(Type::kText, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kTimestamp, "\\N"), "NULL");
  EXPECT_EQ(part(Type::kTimestamp, "x"),
            "error: \"x\" is not a timestamp (2024-05-01T13:45:00Z or 20240501T134500Z)");
  // Every spelling of the shared table.
  for (const timestamp_cases::Case& c : timestamp_cases::kCases) {
    auto value = ParseKeyPart(Type::kTimestamp, c.text);
    if ((c.readers & timestamp_cases::kKeyPart) != 0) {
      ASSERT_TRUE(value) << c.text << ": " << value.error().message;
      EXPECT_EQ(FormatTimestamp(value->i), c.instant) << c.text;
    } else {
      EXPECT_FALSE(value) << c.text << " read as " << definitions::DebugString(*value);
    }
  }
  // Every key spelling of FormatTimestamp parses back.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const int64_t low = MicrosFromCivil(1, 1, 1);
    const int64_t high = MicrosFromCivil(9999, 12, 31, 23, 59, 59, 999999);
    const int64_t micros = low + static_cast<int64_t>(rng() % static_cast<uint64_t>(high - low));
    auto value = ParseKeyPart(Type::kTimestamp, FormatTimestamp(micros));
    ASSERT_TRUE(value) << FormatTimestamp(micros);
    ASSERT_EQ(value->i, micros) << FormatTimestamp(micros);
  }
}

}  // namespace
}  // namespace tally::derived
