#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace tally {
namespace {

TEST(Crc32c, MatchesKnownVectors) {
  // RFC 3720 (iSCSI) test vectors.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32c, ExtendsIncrementally) {
  const std::string text = "tally counts every change exactly once";
  const uint32_t whole = Crc32c(text.data(), text.size());
  const uint32_t first = Crc32c(text.data(), 10);
  EXPECT_EQ(Crc32c(text.data() + 10, text.size() - 10, first), whole);
}

}  // namespace
}  // namespace tally
