#include "core/utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "core/escape.h"

namespace tally {
namespace {

TEST(Utf8, LengthsOfWellFormedSequences) {
  EXPECT_EQ(Utf8MultiByteLength("\xc3\xa9", 0), 2u);          // é
  EXPECT_EQ(Utf8MultiByteLength("\xe2\x82\xac", 0), 3u);      // €
  EXPECT_EQ(Utf8MultiByteLength("\xf0\x9f\x98\x80", 0), 4u);  // U+1F600
  EXPECT_EQ(Utf8MultiByteLength("a\xc3\xa9", 1), 2u);
  // The edges: U+0080, U+0800, U+D7FF, U+E000, U+10000, U+10FFFF.
  EXPECT_EQ(Utf8MultiByteLength("\xc2\x80", 0), 2u);
  EXPECT_EQ(Utf8MultiByteLength("\xe0\xa0\x80", 0), 3u);
  EXPECT_EQ(Utf8MultiByteLength("\xed\x9f\xbf", 0), 3u);
  EXPECT_EQ(Utf8MultiByteLength("\xee\x80\x80", 0), 3u);
  EXPECT_EQ(Utf8MultiByteLength("\xf0\x90\x80\x80", 0), 4u);
  EXPECT_EQ(Utf8MultiByteLength("\xf4\x8f\xbf\xbf", 0), 4u);
}

TEST(Utf8, IllFormedSequencesAreZero) {
  EXPECT_EQ(Utf8MultiByteLength("a", 0), 0u);                 // ASCII: not multi-byte
  EXPECT_EQ(Utf8MultiByteLength("\x80", 0), 0u);              // a stray continuation
  EXPECT_EQ(Utf8MultiByteLength("\xc3", 0), 0u);              // cut short
  EXPECT_EQ(Utf8MultiByteLength("\xe2\x82", 0), 0u);          // cut short
  EXPECT_EQ(Utf8MultiByteLength("\xc3(", 0), 0u);             // not a continuation
  EXPECT_EQ(Utf8MultiByteLength("\xc0\xaf", 0), 0u);          // overlong '/'
  EXPECT_EQ(Utf8MultiByteLength("\xc1\xbf", 0), 0u);          // overlong
  EXPECT_EQ(Utf8MultiByteLength("\xe0\x9f\xbf", 0), 0u);      // overlong 3-byte
  EXPECT_EQ(Utf8MultiByteLength("\xed\xa0\x80", 0), 0u);      // surrogate U+D800
  EXPECT_EQ(Utf8MultiByteLength("\xf0\x8f\xbf\xbf", 0), 0u);  // overlong 4-byte
  EXPECT_EQ(Utf8MultiByteLength("\xf4\x90\x80\x80", 0), 0u);  // past U+10FFFF
  EXPECT_EQ(Utf8MultiByteLength("\xf5\x80\x80\x80", 0), 0u);
  EXPECT_EQ(Utf8MultiByteLength("\xff", 0), 0u);
}

TEST(Utf8, IsValid) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("post:42:likes"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac"));
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));  // NUL is ASCII
  EXPECT_FALSE(IsValidUtf8("caf\xc3"));
  EXPECT_FALSE(IsValidUtf8("\x80"));
  EXPECT_FALSE(IsValidUtf8("a\xed\xa0\x80z"));
}

std::string Printable(std::string_view bytes, KeepUtf8 keep_utf8) {
  std::string out;
  AppendPrintable(bytes, keep_utf8, &out);
  return out;
}

TEST(Printable, PrintableAsciiStaysOtherBytesAreHex) {
  EXPECT_EQ(Printable("post:42 likes,~", KeepUtf8::kNo), "post:42 likes,~");
  EXPECT_EQ(Printable(std::string("\0pos:\n\x7f\xff", 8), KeepUtf8::kNo),
            "\\x00pos:\\x0a\\x7f\\xff");
  EXPECT_EQ(Printable("caf\xc3\xa9", KeepUtf8::kNo), "caf\\xc3\\xa9");
  EXPECT_EQ(Printable("caf\xc3\xa9 \xe2\x82\xac", KeepUtf8::kYes), "caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(Printable("cut \xc3", KeepUtf8::kYes), "cut \\xc3");
  EXPECT_EQ(Printable("\xed\xa0\x80", KeepUtf8::kYes), "\\xed\\xa0\\x80");
}

TEST(Printable, TheTextOfAnEscapeDiffersFromTheByte) {
  for (const KeepUtf8 keep : {KeepUtf8::kNo, KeepUtf8::kYes}) {
    EXPECT_EQ(Printable("\x80", keep), "\\x80");
    EXPECT_EQ(Printable("\\x80", keep), "\\x5cx80");
    EXPECT_EQ(Printable("\x01", keep), "\\x01");
    EXPECT_EQ(Printable("\\x01", keep), "\\x5cx01");
    EXPECT_EQ(Printable("a\\b", keep), "a\\x5cb");
  }
}

}  // namespace
}  // namespace tally
