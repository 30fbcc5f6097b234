#include "core/lsn.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tally {
namespace {

using ::testing::HasSubstr;

TEST(LsnTest, FormatsHighSlashPaddedLow) {
  EXPECT_EQ(FormatLsn(0), "0/00000000");
  EXPECT_EQ(FormatLsn(0x16B374D848), "16/B374D848");
  EXPECT_EQ(FormatLsn(0x16B3748), "0/016B3748");
  EXPECT_EQ(FormatLsn(~uint64_t{0}), "FFFFFFFF/FFFFFFFF");
}

TEST(LsnTest, ParsesPaddedUnpaddedAndLowerCase) {
  EXPECT_EQ(*ParseLsn("16/B374D848"), 0x16B374D848u);
  EXPECT_EQ(*ParseLsn("0/16B3748"), 0x16B3748u);
  EXPECT_EQ(*ParseLsn("0/016b3748"), 0x16B3748u);
  EXPECT_EQ(*ParseLsn("FFFFFFFF/FFFFFFFF"), ~uint64_t{0});
  for (Lsn lsn : {Lsn{0}, Lsn{1}, Lsn{0x16B374D848}, ~Lsn{0}}) {
    EXPECT_EQ(*ParseLsn(FormatLsn(lsn)), lsn);
  }
}

TEST(LsnTest, RefusesAnythingElse) {
  for (std::string_view bad : {"", "/", "0/", "/0", "16", "1/2/3", " 1/2", "1/2 ", "+1/2", "1/-2",
                               "123456789/0", "0/123456789", "G/0", "0x1/0"}) {
    auto r = ParseLsn(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message, HasSubstr("invalid LSN"));
  }
}

}  // namespace
}  // namespace tally
