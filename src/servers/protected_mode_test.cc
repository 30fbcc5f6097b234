// Protected mode's decision: which clients an open server refuses.
#include "servers/protected_mode.h"

#include <gtest/gtest.h>

namespace tally::servers {
namespace {

boost::asio::ip::address At(const char* text) { return boost::asio::ip::make_address(text); }

TEST(ProtectedModeTest, AnOpenServerServesLoopbackOnly) {
  for (const char* local : {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"}) {
    EXPECT_FALSE(RefusedByProtectedMode(true, true, At(local))) << local;
  }
  for (const char* remote : {"10.0.0.7", "192.168.1.20", "8.8.8.8", "fe80::1", "2001:db8::1",
                             "::ffff:10.0.0.7", "0.0.0.0"}) {
    EXPECT_TRUE(RefusedByProtectedMode(true, true, At(remote))) << remote;
  }
}

TEST(ProtectedModeTest, APasswordOrProtectedModeOffLetsEveryoneConnect) {
  EXPECT_FALSE(RefusedByProtectedMode(true, false, At("10.0.0.7")));  // a password is set
  EXPECT_FALSE(RefusedByProtectedMode(false, true, At("10.0.0.7")));  // --protected-mode no
  EXPECT_FALSE(RefusedByProtectedMode(false, false, At("10.0.0.7")));
}

TEST(ProtectedModeTest, TheMessageIsRedisDeniedError) {
  EXPECT_TRUE(kProtectedModeMessage.starts_with("DENIED "));
  EXPECT_NE(kProtectedModeMessage.find("--protected-mode no"), std::string_view::npos);
  EXPECT_EQ(kProtectedModeMessage.find('\n'), std::string_view::npos);  // one error line
}

}  // namespace
}  // namespace tally::servers
