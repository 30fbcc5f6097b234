// Volume tests of the change decoder: a round trip of random rows, a large batch, the
// decoding rate (logged, never asserted), and random edits of valid bodies.
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
#include "engine/definitions/numeric.h"
#include "engine/derived/change_json.h"
#include "engine/derived/change_json_test_util.h"

namespace tally::derived {
namespace {

using namespace tally::derived::testing;  // NOLINT(google-build-using-namespace): fixtures

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

}  // namespace
}  // namespace tally::derived
