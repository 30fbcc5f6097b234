#include "programs/byte_size.h"

#include <gtest/gtest.h>

namespace tally::programs {
namespace {

TEST(ByteSizeTest, NumbersAndUnits) {
  EXPECT_EQ(ParseByteSize("0").value(), 0);
  EXPECT_EQ(ParseByteSize("1048576").value(), 1048576);
  EXPECT_EQ(ParseByteSize("7b").value(), 7);
  EXPECT_EQ(ParseByteSize("512k").value(), 512 * 1024);
  EXPECT_EQ(ParseByteSize("512KB").value(), 512 * 1024);
  EXPECT_EQ(ParseByteSize("64mb").value(), int64_t{64} << 20);
  EXPECT_EQ(ParseByteSize("64M").value(), int64_t{64} << 20);
  EXPECT_EQ(ParseByteSize("1gb").value(), int64_t{1} << 30);
  EXPECT_EQ(ParseByteSize("8589934591g").value(), int64_t{8589934591} << 30);
}

TEST(ByteSizeTest, BadTextSaysWhy) {
  const auto message = [](std::string_view text) {
    auto size = ParseByteSize(text);
    EXPECT_FALSE(size) << text;
    return size ? std::string() : size.error().message;
  };
  EXPECT_EQ(message(""), "bad size '': give a number of bytes, optionally with a unit (64mb)");
  EXPECT_EQ(message("mb"), "bad size 'mb': give a number of bytes, optionally with a unit (64mb)");
  EXPECT_EQ(message("-1mb"),
            "bad size '-1mb': give a number of bytes, optionally with a unit (64mb)");
  EXPECT_EQ(message(" 1mb"),
            "bad size ' 1mb': give a number of bytes, optionally with a unit (64mb)");
  EXPECT_EQ(message("12tb"), "bad size '12tb': unknown unit 'tb' (use b, kb, mb or gb)");
  EXPECT_EQ(message("1 mb"), "bad size '1 mb': unknown unit ' mb' (use b, kb, mb or gb)");
  EXPECT_EQ(message("99999999999999999999"), "bad size '99999999999999999999': too large");
  EXPECT_EQ(message("8589934592g"), "bad size '8589934592g': too large");
}

}  // namespace
}  // namespace tally::programs
