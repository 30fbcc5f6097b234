#include "servers/http/router.h"

#include <gtest/gtest.h>

namespace tally::http {
namespace {

const Router& TestRouter() {
  static const Router kRouter({
      {"POST", "/v1/changes", "id"},
      {"GET", "/v1/value/{counter}/*", ""},
      {"GET", "/v1/list/{counter}/*", "cursor limit"},
      {"POST", "/v1/definitions", ""},
      {"GET", "/v1/definitions", ""},
      {"DELETE", "/v1/definitions/{counter}", ""},
      {"GET", "/healthz", ""},
  });
  return kRouter;
}

RouteMatch Match(std::string_view method, std::string_view target) {
  auto parsed = ParseRequestTarget(target);
  EXPECT_TRUE(parsed);
  return TestRouter().Match(method, *parsed);
}

TEST(RouterTest, FindsRouteAndDecodesParameters) {
  RouteMatch match = Match("GET", "/v1/value/blog%5Fposts/7/a%2Fb/");
  ASSERT_EQ(match.kind, RouteMatch::Kind::kFound);
  EXPECT_EQ(match.route, 1u);
  EXPECT_EQ(match.params, (std::vector<std::string>{"blog_posts", "7", "a/b", ""}));

  match = Match("GET", "/v1/value/c");
  ASSERT_EQ(match.kind, RouteMatch::Kind::kFound);
  EXPECT_EQ(match.params, (std::vector<std::string>{"c"}));

  match = Match("DELETE", "/v1/definitions/x");
  ASSERT_EQ(match.kind, RouteMatch::Kind::kFound);
  EXPECT_EQ(match.route, 5u);
  EXPECT_EQ(match.params, (std::vector<std::string>{"x"}));

  EXPECT_EQ(Match("GET", "/healthz").kind, RouteMatch::Kind::kFound);
}

TEST(RouterTest, UnknownPathIsNotFound) {
  EXPECT_EQ(Match("GET", "/").kind, RouteMatch::Kind::kNotFound);
  EXPECT_EQ(Match("GET", "/v1").kind, RouteMatch::Kind::kNotFound);
  EXPECT_EQ(Match("GET", "/v1/value").kind, RouteMatch::Kind::kNotFound);  // no {counter}
  EXPECT_EQ(Match("GET", "/healthz/").kind, RouteMatch::Kind::kNotFound);
  EXPECT_EQ(Match("GET", "/v1/definitions/a/b").kind, RouteMatch::Kind::kNotFound);
  EXPECT_EQ(Match("GET", "/V1/changes").kind, RouteMatch::Kind::kNotFound);
}

TEST(RouterTest, KnownPathWithOtherMethodListsAllowed) {
  RouteMatch match = Match("PUT", "/v1/definitions");
  EXPECT_EQ(match.kind, RouteMatch::Kind::kWrongMethod);
  EXPECT_EQ(match.allow, "POST, GET");
  match = Match("GET", "/v1/changes");
  EXPECT_EQ(match.kind, RouteMatch::Kind::kWrongMethod);
  EXPECT_EQ(match.allow, "POST");
  EXPECT_EQ(Match("get", "/healthz").kind, RouteMatch::Kind::kWrongMethod);  // case matters
}

TEST(RouterTest, QueryParametersAreChecked) {
  EXPECT_EQ(Match("GET", "/v1/list/c/1?cursor=x&limit=3").kind, RouteMatch::Kind::kFound);
  RouteMatch match = Match("GET", "/v1/list/c?limt=3");
  EXPECT_EQ(match.kind, RouteMatch::Kind::kBadRequest);
  EXPECT_EQ(match.error, "unknown query parameter \"limt\" (this route takes: cursor, limit)");
  match = Match("GET", "/healthz?x=1");
  EXPECT_EQ(match.error, "unknown query parameter \"x\": this route takes none");
  match = Match("GET", "/v1/list/c?limit=1&limit=2");
  EXPECT_EQ(match.error, "query parameter \"limit\" given twice");
}

TEST(RouterTest, ANameWithAStarMayBeRepeated) {
  const Router router({{"GET", "/v1/events", "key* prefix* token"}});
  const auto match = [&router](std::string_view target) {
    return router.Match("GET", *ParseRequestTarget(target));
  };
  EXPECT_EQ(match("/v1/events?key=a&key=b&prefix=p&key=c").kind, RouteMatch::Kind::kFound);
  EXPECT_EQ(match("/v1/events?token=1&token=2").error, "query parameter \"token\" given twice");
  EXPECT_EQ(match("/v1/events?keys=a").error,
            "unknown query parameter \"keys\" (this route takes: key, prefix, token)");
}

TEST(RouterTest, BadPercentEncodingInAParameter) {
  RouteMatch match = Match("GET", "/v1/value/c/%zz");
  EXPECT_EQ(match.kind, RouteMatch::Kind::kBadRequest);
  EXPECT_EQ(match.error, "path: bad percent-encoding at byte 0 of \"%zz\"");
  // Literal segments are compared as sent and never decoded.
  EXPECT_EQ(Match("GET", "/v1/%76alue/c").kind, RouteMatch::Kind::kNotFound);
}

TEST(RouterTest, RootIsOnlyTheRoot) {
  const Router router({{"GET", "/", ""}, {"GET", "/assets/*", ""}});
  const auto match = [&router](std::string_view target) {
    return router.Match("GET", *ParseRequestTarget(target));
  };
  EXPECT_EQ(match("/").kind, RouteMatch::Kind::kFound);
  EXPECT_EQ(match("/").route, 0u);
  EXPECT_EQ(match("//").kind, RouteMatch::Kind::kNotFound);
  EXPECT_EQ(match("/x").kind, RouteMatch::Kind::kNotFound);
  EXPECT_EQ(match("/assets/app.js").route, 1u);
  EXPECT_EQ(match("/assets/app.js").params, (std::vector<std::string>{"app.js"}));
  EXPECT_EQ(router.Match("POST", *ParseRequestTarget("/")).kind, RouteMatch::Kind::kWrongMethod);
}

}  // namespace
}  // namespace tally::http
