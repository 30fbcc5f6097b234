#include "servers/http/dashboard_assets.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::http {
namespace {

TEST(EtagMatchesTest, ExactWeakListsAndStar) {
  const std::string_view etag = "\"abc\"";
  EXPECT_TRUE(EtagMatches("\"abc\"", etag));
  EXPECT_TRUE(EtagMatches("W/\"abc\"", etag));
  EXPECT_TRUE(EtagMatches("\"x\", \"abc\"", etag));
  EXPECT_TRUE(EtagMatches(" \"x\" ,W/\"abc\" ", etag));
  EXPECT_TRUE(EtagMatches("*", etag));
  EXPECT_FALSE(EtagMatches("", etag));
  EXPECT_FALSE(EtagMatches("abc", etag));
  EXPECT_FALSE(EtagMatches("\"abcd\"", etag));
  EXPECT_FALSE(EtagMatches("\"x\", \"y\"", etag));
  EXPECT_FALSE(EtagMatches(",,", etag));
}

// The embedded build is whole: a page at "/" whose script and stylesheet are embedded too,
// every file with a content type, a strong ETag and a caching policy.
TEST(DashboardAssetsTest, PageAndItsAssetsAreEmbedded) {
  const DashboardAsset* page = FindDashboardAsset("/");
  ASSERT_NE(page, nullptr);
  EXPECT_EQ(page->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(page->cache_control, "no-cache");
  int scripts = 0;
  int stylesheets = 0;
  for (const DashboardAsset& asset : DashboardAssets()) {
    EXPECT_FALSE(asset.body.empty()) << asset.path;
    EXPECT_EQ(asset.etag.size(), 34u) << asset.path;
    EXPECT_TRUE(asset.etag.starts_with('"') && asset.etag.ends_with('"')) << asset.path;
    EXPECT_EQ(FindDashboardAsset(asset.path), &asset);
    if (asset.path == "/") continue;
    EXPECT_TRUE(asset.path.starts_with("/assets/")) << asset.path;
    EXPECT_EQ(asset.cache_control, "public, max-age=31536000, immutable") << asset.path;
    EXPECT_NE(page->body.find(std::string(asset.path)), std::string_view::npos)
        << "index.html does not name " << asset.path;
    if (asset.content_type == "text/javascript; charset=utf-8") ++scripts;
    if (asset.content_type == "text/css; charset=utf-8") ++stylesheets;
  }
  EXPECT_EQ(scripts, 1);
  EXPECT_EQ(stylesheets, 1);
  EXPECT_EQ(FindDashboardAsset("/assets/nothing.js"), nullptr);
  EXPECT_EQ(FindDashboardAsset(""), nullptr);
}

}  // namespace
}  // namespace tally::http
