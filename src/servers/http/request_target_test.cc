#include "servers/http/request_target.h"

#include <gtest/gtest.h>

namespace tally::http {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

TEST(PercentDecodeTest, Decodes) {
  EXPECT_EQ(*PercentDecode("a%2Fb%3a%00c", false), std::string("a/b:\0c", 6));
  EXPECT_EQ(*PercentDecode("a+b", false), "a+b");
  EXPECT_EQ(*PercentDecode("a+b%2B", true), "a b+");
  EXPECT_EQ(*PercentDecode("%ff", false), "\xff");
}

TEST(PercentDecodeTest, RefusesBadEscapes) {
  EXPECT_EQ(PercentDecode("ab%", false).error().message,
            "bad percent-encoding at byte 2 of \"ab%\"");
  EXPECT_FALSE(PercentDecode("%4", false));
  EXPECT_FALSE(PercentDecode("%zz", false));
}

TEST(RequestTargetTest, SplitsPathIntoRawSegments) {
  auto target = ParseRequestTarget("/v1/value/blog_posts/7/a%2Fb");
  ASSERT_TRUE(target);
  EXPECT_EQ(target->segments,
            (std::vector<std::string_view>{"v1", "value", "blog_posts", "7", "a%2Fb"}));
  EXPECT_TRUE(target->query.empty());
  EXPECT_EQ(ParseRequestTarget("/")->segments, (std::vector<std::string_view>{""}));
  EXPECT_EQ(ParseRequestTarget("/a//b/")->segments,
            (std::vector<std::string_view>{"a", "", "b", ""}));
}

TEST(RequestTargetTest, DecodesQuery) {
  auto target = ParseRequestTarget("/v1/list/c?cursor=a%3A1+x&limit=5&&flag&e=");
  ASSERT_TRUE(target);
  EXPECT_EQ(target->segments, (std::vector<std::string_view>{"v1", "list", "c"}));
  EXPECT_EQ(target->query, (Pairs{{"cursor", "a:1 x"}, {"limit", "5"}, {"flag", ""}, {"e", ""}}));
  EXPECT_EQ(ParseRequestTarget("/x?")->query, Pairs{});
}

TEST(RequestTargetTest, RefusesOtherForms) {
  EXPECT_EQ(ParseRequestTarget("http://host/x").error().message,
            "the request target must be a path starting with '/'");
  EXPECT_FALSE(ParseRequestTarget("*"));
  EXPECT_FALSE(ParseRequestTarget(""));
  EXPECT_FALSE(ParseRequestTarget("/x?a=%g0"));
}

}  // namespace
}  // namespace tally::http
