// Tests of the change decoder's framing and walk: every body form, every error of a body
// and of a change with its exact message, and reuse of a decoder. The cells are in
// change_cell_test.cc, volume and random bodies in change_json_volume_test.cc.
#include "engine/derived/change_json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/calendar.h"
#include "engine/derived/change_json_test_util.h"

namespace tally::derived {
namespace {

using namespace tally::derived::testing;  // NOLINT(google-build-using-namespace): fixtures

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
  // A number simdjson does not hold is JSON (change_cell_test.cc): the JSON error found is
  // the one after it, wherever it is.
  EXPECT_EQ(DecodeError("{\"new\": {\"post_id\": 99999999999999999999, \"x\": 01}}"),
            "invalid JSON: Problem while parsing a number near byte 47");
  EXPECT_EQ(DecodeError("{\"new\": {\"post_id\": 1e400, \"x\": [1,,2]}}"),
            "invalid JSON: The JSON document has an improper structure: missing or superfluous "
            "commas, braces, missing keys, etc near byte 35");
  EXPECT_EQ(DecodeError("{\"source\": \"likes\", \"new\": {\"post_id\": 1, \"x\": -1e400}} x"),
            "invalid JSON: The JSON document has an improper structure: missing or superfluous "
            "commas, braces, missing keys, etc near byte 56");
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

// ---- Reuse ----------------------------------------------------------------------------

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

}  // namespace
}  // namespace tally::derived
