#include "core/constant_time.h"

#include <gtest/gtest.h>

#include <string>

namespace tally {
namespace {

TEST(ConstantTimeEquals, EqualOnlyWhenEveryByteAndTheLengthMatch) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("Bearer s3cret", "Bearer s3cret"));
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(ConstantTimeEquals("Bearer s3creT", "Bearer s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("xearer s3cret", "Bearer s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer s3cre", "Bearer s3cret"));    // a prefix
  EXPECT_FALSE(ConstantTimeEquals("Bearer s3crets", "Bearer s3cret"));  // longer
  EXPECT_FALSE(ConstantTimeEquals("", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", ""));
  // A NUL where the secret ends is not the end of the given text.
  EXPECT_FALSE(ConstantTimeEquals(std::string("ab\0", 3), "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", std::string("ab\0", 3)));
}

}  // namespace
}  // namespace tally
