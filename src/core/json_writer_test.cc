#include "core/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tally {
namespace {

std::string Quote(std::string_view text) {
  std::string out;
  AppendJsonString(text, &out);
  return out;
}

TEST(JsonStringTest, PlainTextPassesThrough) {
  EXPECT_EQ(Quote(""), "\"\"");
  EXPECT_EQ(Quote("blog_posts:7:3"), "\"blog_posts:7:3\"");
}

TEST(JsonStringTest, QuoteBackslashAndControlsAreEscaped) {
  EXPECT_EQ(Quote("a\"b"), R"("a\"b")");
  EXPECT_EQ(Quote("x\\:y"), R"("x\\:y")");
  EXPECT_EQ(Quote("\n\r\t\b\f"), R"("\n\r\t\b\f")");
  EXPECT_EQ(Quote(std::string_view("\0\x01\x1f", 3)), R"("\u0000\u0001\u001f")");
  EXPECT_EQ(Quote("\x7f"), "\"\x7f\"");  // DEL needs no escape in JSON
}

TEST(JsonStringTest, ValidUtf8PassesThrough) {
  EXPECT_EQ(Quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");            // U+00E9
  EXPECT_EQ(Quote("\xe2\x82\xac"), "\"\xe2\x82\xac\"");          // U+20AC
  EXPECT_EQ(Quote("\xef\xbf\xbf"), "\"\xef\xbf\xbf\"");          // U+FFFF
  EXPECT_EQ(Quote("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");  // U+1F600
  EXPECT_EQ(Quote("\xf4\x8f\xbf\xbf"), "\"\xf4\x8f\xbf\xbf\"");  // U+10FFFF
  EXPECT_EQ(Quote("\xed\x9f\xbf"), "\"\xed\x9f\xbf\"");          // U+D7FF
}

TEST(JsonStringTest, InvalidBytesAreEscapedOneByOne) {
  EXPECT_EQ(Quote("\xff"), R"("\u00ff")");
  EXPECT_EQ(Quote("a\x80z"), R"("a\u0080z")");                            // stray continuation
  EXPECT_EQ(Quote("\xc3"), R"("\u00c3")");                                // truncated at the end
  EXPECT_EQ(Quote("\xc3z"), R"("\u00c3z")");                              // truncated in the middle
  EXPECT_EQ(Quote("\xc0\x80"), R"("\u00c0\u0080")");                      // overlong NUL
  EXPECT_EQ(Quote("\xe0\x80\xaf"), R"("\u00e0\u0080\u00af")");            // overlong '/'
  EXPECT_EQ(Quote("\xed\xa0\x80"), R"("\u00ed\u00a0\u0080")");            // surrogate U+D800
  EXPECT_EQ(Quote("\xf4\x90\x80\x80"), R"("\u00f4\u0090\u0080\u0080")");  // > U+10FFFF
  EXPECT_EQ(Quote("\xf5\x80\x80\x80"), R"("\u00f5\u0080\u0080\u0080")");
  // A valid sequence right after an invalid byte is kept.
  EXPECT_EQ(Quote("\xe2\xc3\xa9"), "\"\\u00e2\xc3\xa9\"");
}

TEST(JsonWriterTest, PlacesCommasAndColons) {
  JsonWriter json;
  json.BeginObject().Key("items").BeginArray();
  json.BeginObject().Key("key").String("a:1").Key("value").Int(-12).EndObject();
  json.BeginObject().Key("key").String("a:2").Key("value").Int(7).EndObject();
  json.EndArray()
      .Key("empty")
      .BeginArray()
      .EndArray()
      .Key("n")
      .UInt(18446744073709551615ULL)
      .Key("ok")
      .Bool(true)
      .Key("list")
      .BeginArray()
      .String("x")
      .Bool(false)
      .Int(0)
      .EndArray()
      .EndObject();
  EXPECT_EQ(json.text(),
            R"({"items":[{"key":"a:1","value":-12},{"key":"a:2","value":7}],"empty":[],)"
            R"("n":18446744073709551615,"ok":true,"list":["x",false,0]})");
}

TEST(JsonWriterTest, DoublesAreShortestAndNeverNanOrInfinity) {
  JsonWriter json;
  json.BeginArray()
      .Double(12.5)
      .Double(3)
      .Double(0.1)
      .Double(std::nan(""))
      .Double(std::numeric_limits<double>::infinity());
  json.EndArray();
  EXPECT_EQ(json.text(), "[12.5,3,0.1,null,null]");
}

TEST(JsonWriterTest, ErrorJson) {
  EXPECT_EQ(ErrorJson("change 3: \"new\" is not an object"),
            R"({"error":"change 3: \"new\" is not an object"})");
}

}  // namespace
}  // namespace tally
