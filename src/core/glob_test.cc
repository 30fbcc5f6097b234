#include "core/glob.h"

#include <gtest/gtest.h>

namespace tally {
namespace {

TEST(GlobMatch, FollowsRedisRules) {
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("counter:*", "counter:42"));
  EXPECT_FALSE(GlobMatch("counter:*", "count"));
  EXPECT_TRUE(GlobMatch("h?llo", "hello"));
  EXPECT_FALSE(GlobMatch("h?llo", "hllo"));
  EXPECT_TRUE(GlobMatch("h[ae]llo", "hallo"));
  EXPECT_FALSE(GlobMatch("h[^e]llo", "hello"));
  EXPECT_TRUE(GlobMatch("h[a-c]llo", "hbllo"));
  EXPECT_TRUE(GlobMatch("a\\*b", "a*b"));
  EXPECT_FALSE(GlobMatch("a\\*b", "axb"));
  EXPECT_TRUE(GlobMatch("MAXCLIENTS", "maxclients", true));
  EXPECT_TRUE(GlobMatch("*a*b*c*", "xxaxxbxxcxx"));
}

TEST(GlobMatch, ManyStarsStayBounded) {
  const std::string pattern(5000, '*');
  EXPECT_TRUE(GlobMatch(pattern, "abc"));
  EXPECT_FALSE(GlobMatch("a*a*a*a*a*a*a*a*a*b", std::string(40, 'a')));
}

}  // namespace
}  // namespace tally
