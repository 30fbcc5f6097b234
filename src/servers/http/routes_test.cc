// The HTTP API's routes without sockets: each request in as method, target and body, its
// status and JSON body out, against a real Engine and DerivedCounters over a store in a
// temporary directory.
#include "servers/http/routes.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/version.h"
#include "engine/derived/derived_test_util.h"
#include "servers/http/http_auth.h"

namespace tally::http {
namespace {

using namespace std::string_literals;
using namespace std::string_view_literals;

constexpr int64_t kNowMs = 1'700'000'000'000;

constexpr std::string_view kSchema =
    "CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, rating integer);"
    "CREATE COUNTER blog_posts AS SELECT blog_id, user_id, count(*) FROM posts "
    "GROUP BY blog_id, user_id;";

// An insert of a post, as a change.
std::string Post(int id, int blog, int user, int rating = 1) {
  return fmt::format(
      R"({{"source":"posts","new":{{"id":{},"user_id":{},"blog_id":{},"rating":{}}}}})", id, user,
      blog, rating);
}

class ApiTest : public derived::DerivedStoreTest {
 protected:
  ApiTest() : DerivedStoreTest("tally_api_test_", kNowMs, derived::DerivedOptions{}) {}

  void SetUp() override {
    DerivedStoreTest::SetUp();
    Serve(Parts());
  }
  void TearDown() override {
    api_.reset();
    DerivedStoreTest::TearDown();
  }

  // The node's parts but the derived counters, which Serve adds: none else by default.
  servers::Services Parts() { return servers::Services(*engine_); }

  // A fresh Api with these parts and settings.
  void Serve(servers::Services services, ApiOptions options = {}) {
    services.derived = derived_.get();
    options.requests = &requests_;
    api_ = std::make_unique<Api>(std::move(services), std::move(options));
  }

  ApiResponse Call(std::string_view method, std::string_view target, std::string_view body = {},
                   std::string_view authorization = {}, AuthCache* cache = nullptr) {
    ApiRequest request;
    request.method = method;
    request.target = target;
    request.body = body;
    request.authorization = authorization;
    request.client_address = "10.0.0.1";
    request.auth_cache = cache;
    return api_->Handle(request);
  }

  void Define() {
    const ApiResponse response = Call("POST", "/v1/definitions", kSchema);
    ASSERT_EQ(response.status, 200) << response.body;
  }

  ApiRequestCounts requests_;
  std::unique_ptr<Api> api_;
};

TEST_F(ApiTest, DefinitionsAreCreatedListedAndDropped) {
  ApiResponse response = Call("POST", "/v1/definitions", kSchema);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, R"({"results":["CREATE SOURCE posts","CREATE COUNTER blog_posts"]})");
  EXPECT_TRUE(response.wrote);

  response = Call("GET", "/v1/definitions");
  EXPECT_EQ(response.status, 200);
  EXPECT_NE(response.body.find(R"("name":"blog_posts","source":"posts")"), std::string::npos)
      << response.body;
  EXPECT_NE(response.body.find(R"("key_columns":["blog_id int64","user_id int64"],"groups":0)"),
            std::string::npos)
      << response.body;

  response = Call("POST", "/v1/definitions", "CREATE COUNTER broken AS SELECT nonsense");
  EXPECT_EQ(response.status, 400);
  EXPECT_TRUE(response.body.starts_with(R"({"error":")")) << response.body;

  response = Call("DELETE", "/v1/definitions/blog_posts");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, R"({"results":["DROP COUNTER blog_posts"]})");
  response = Call("DELETE", "/v1/definitions/blog_posts");
  EXPECT_EQ(response.status, 404) << response.body;
}

TEST_F(ApiTest, PushedChangesAreCountedOnceAndRead) {
  Define();
  ApiResponse response =
      Call("POST", "/v1/changes?id=batch-1", fmt::format("[{},{}]", Post(1, 7, 3), Post(2, 7, 3)));
  EXPECT_EQ(response.status, 200);
  // Both changes count in one group: one counter key written.
  EXPECT_EQ(response.body, R"({"changes":2,"applied":2,"duplicates":0,"increments":1})");
  EXPECT_TRUE(response.wrote);
  EXPECT_GT(response.required_epoch, 0u);

  // A resend of the batch is a duplicate, counted nowhere.
  response =
      Call("POST", "/v1/changes?id=batch-1", fmt::format("[{},{}]", Post(1, 7, 3), Post(2, 7, 3)));
  EXPECT_EQ(response.body, R"({"changes":2,"applied":0,"duplicates":2,"increments":0})");
  EXPECT_FALSE(response.wrote);

  response = Call("POST", "/v1/backfill/blog_posts", Post(3, 8, 1));
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, R"({"changes":1,"applied":1,"duplicates":0,"increments":1})");

  response = Call("GET", "/v1/value/blog_posts/7/3");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, R"({"key":"blog_posts:7:3","value":2})");
  response = Call("GET", "/v1/value/blog_posts/9/9");
  EXPECT_EQ(response.body, R"({"key":"blog_posts:9:9","value":0})");

  response = Call("POST", "/v1/values", R"({"counter":"blog_posts","keys":[[7,3],[8,1],[8,2]]})");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body,
            R"({"values":[{"key":"blog_posts:7:3","value":2},{"key":"blog_posts:8:1","value":1},)"
            R"({"key":"blog_posts:8:2","value":0}]})");

  response = Call("GET", "/v1/list/blog_posts?limit=1");
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(response.body.starts_with(R"({"items":[{"key":"blog_posts:7:3","value":2}],)"
                                        R"("next_cursor":")"))
      << response.body;
  response = Call("GET", "/v1/list/blog_posts/8");
  EXPECT_EQ(response.body, R"({"items":[{"key":"blog_posts:8:1","value":1}],"next_cursor":""})");

  response = Call("GET", "/v1/top/blog_posts?k=2");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body,
            R"({"items":[{"key":"blog_posts:7:3","value":2},{"key":"blog_posts:8:1","value":1}]})");
}

TEST_F(ApiTest, BadPushesAreRefusedWhole) {
  Define();
  ApiResponse response = Call("POST", "/v1/changes", "{not json");
  EXPECT_EQ(response.status, 400);
  EXPECT_TRUE(response.body.starts_with(R"({"error":"invalid JSON: )")) << response.body;

  response = Call("POST", "/v1/changes",
                  fmt::format(R"([{},{{"source":"postz","new":{{}}}}])", Post(1, 7, 3)));
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body, R"({"error":"change 2: unknown source \"postz\""})");
  EXPECT_EQ(Call("GET", "/v1/value/blog_posts/7/3").body, R"({"key":"blog_posts:7:3","value":0})");

  ApiRequest request;
  request.method = "POST";
  request.target = "/v1/changes?id=a";
  request.body = Post(1, 7, 3);
  request.has_idempotency_key = true;
  request.idempotency_key = "b";
  response = api_->Handle(request);
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body, R"({"error":"the Idempotency-Key header and the id parameter differ"})");
  response = Call("POST", "/v1/changes?id=", Post(1, 7, 3));
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body, R"({"error":"the idempotency key is empty"})");

  response = Call("POST", "/v1/backfill/nope", Post(1, 7, 3));
  EXPECT_EQ(response.status, 404) << response.body;
}

TEST_F(ApiTest, BadReadsSayWhy) {
  Define();
  ApiResponse response = Call("GET", "/v1/value/nope/1");
  EXPECT_EQ(response.status, 404);
  EXPECT_TRUE(response.body.starts_with(R"({"error":")")) << response.body;
  response = Call("GET", "/v1/value/blog_posts/x/1");
  EXPECT_EQ(response.status, 400) << response.body;

  response = Call("GET", "/v1/list/blog_posts?limit=0");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body, R"({"error":"limit must be an integer from 1 to 10000, got \"0\""})");
  response = Call("GET", "/v1/top/blog_posts?k=10001");
  EXPECT_EQ(response.body, R"({"error":"k must be an integer from 1 to 10000, got \"10001\""})");
  response = Call("GET", "/v1/range/blog_posts/7/3");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body,
            R"j({"error":"a range needs ?from=<instant>&to=<instant> (2024-05-01T00:00:00Z, )j"
            R"j(20240501T000000Z or Unix seconds)"})j");

  response = Call("POST", "/v1/values", "[1]");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body,
            R"({"error":"the body must be a JSON object {\"counter\": \"name\", \"keys\": )"
            R"([[part, ...], ...]}"})");
  response = Call("POST", "/v1/values", R"({"counter":"blog_posts"})");
  EXPECT_EQ(response.body, R"({"error":"\"keys\" is missing"})");
  response = Call("POST", "/v1/values", R"({"counter":"blog_posts","keys":[[7,1.5]]})");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body,
            R"({"error":"keys[0][1]: a key part must be an integer, a string, true, false or )"
            R"(null, got a number that is not an integer"})");
  response =
      Call("POST", "/v1/values", R"({"counter":"blog_posts","keys":[[7,99999999999999999999]]})");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.body,
            R"j({"error":"invalid JSON: a number out of range (an integer key part is an int64, )j"
            R"j(-9223372036854775808 to 9223372036854775807)"})j");
  response = Call("POST", "/v1/values", R"({"counter":"nope","keys":[]})");
  EXPECT_EQ(response.status, 404) << response.body;
}

TEST_F(ApiTest, UnknownRoutesAndMethods) {
  ApiResponse response = Call("GET", "/v2/nothing?x=1");
  EXPECT_EQ(response.status, 404);
  EXPECT_EQ(response.body, R"({"error":"no such route: /v2/nothing"})");
  response = Call("PUT", "/v1/changes");
  EXPECT_EQ(response.status, 405);
  EXPECT_EQ(response.allow, "POST");
  EXPECT_EQ(response.body, R"j({"error":"method PUT not allowed here (allowed: POST)"})j");
}

TEST_F(ApiTest, StatusHealthAndReadiness) {
  Define();
  ApiResponse response = Call("GET", "/v1/status");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, fmt::format(R"({{"version":"{}","durability":"sync","counters":1,)"
                                       R"("source":null}})",
                                       Version()));
  EXPECT_EQ(Call("GET", "/healthz").body, R"({"status":"ok"})");
  response = Call("GET", "/readyz");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, R"({"status":"ready"})");

  servers::Services services = Parts();
  services.source_report = [] {
    return StatusReport{{"state", std::string("streaming")}, {"lag_bytes", uint64_t{12}}};
  };
  services.readiness = [] { return MakeError(ErrorCode::kUnavailable, "the source is starting"); };
  Serve(std::move(services));
  response = Call("GET", "/v1/status");
  EXPECT_EQ(response.body, fmt::format(R"({{"version":"{}","durability":"sync","counters":1,)"
                                       R"("source":{{"state":"streaming","lag_bytes":12}}}})",
                                       Version()));
  response = Call("GET", "/readyz");
  EXPECT_EQ(response.status, 503);
  EXPECT_EQ(response.body, R"({"status":"not ready","reason":"the source is starting"})");
}

TEST_F(ApiTest, MetricsAreServedWhenTheNodeHasThem) {
  EXPECT_EQ(Call("GET", "/metrics").status, 404);
  metrics::Registry registry;
  registry.AddGauge("tally_test_gauge", "A gauge of the test.", [] { return 7.0; });
  servers::Services services = Parts();
  services.metrics = &registry;
  Serve(std::move(services));
  const ApiResponse response = Call("GET", "/metrics");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.content_type, metrics::Registry::kContentType);
  EXPECT_NE(response.body.find("tally_test_gauge 7\n"), std::string::npos) << response.body;
}

TEST_F(ApiTest, HotKeysAndSubscriptionRequests) {
  ApiResponse response = Call("GET", "/v1/hot?n=0");
  EXPECT_EQ(response.status, 400);
  response = Call("GET", "/v1/hot");
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(response.body.starts_with(R"({"window_seconds":60,"counters":[)")) << response.body;

  response = Call("GET", "/v1/events?key=a&prefix=b:&key=c");
  EXPECT_EQ(response.status, 200);
  ASSERT_TRUE(response.subscription.has_value());
  EXPECT_FALSE(response.subscription->websocket);
  EXPECT_EQ(response.subscription->keys, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(response.subscription->prefixes, (std::vector<std::string>{"b:"}));
  response = Call("GET", "/v1/events");
  EXPECT_EQ(response.status, 400);
  EXPECT_FALSE(response.subscription.has_value());
  response = Call("GET", "/v1/subscribe?key=a");
  EXPECT_EQ(response.status, 426);  // not an upgrade request
}

TEST_F(ApiTest, WithAPasswordRequestsNeedTheBearerToken) {
  Define();
  Serve(Parts(), ApiOptions{.password = "pw"});
  ApiResponse response = Call("GET", "/v1/status");
  EXPECT_EQ(response.status, 401);
  EXPECT_TRUE(response.authenticate);
  EXPECT_EQ(response.body,
            R"({"error":"authentication required: send Authorization: Bearer <password>"})");
  response = Call("GET", "/v1/status", {}, "Bearer nope");
  EXPECT_EQ(response.status, 401);
  EXPECT_EQ(response.body, R"({"error":"invalid password"})");
  EXPECT_EQ(Call("GET", "/v1/status", {}, "Bearer pw").status, 200);
  EXPECT_EQ(Call("POST", "/v1/changes", Post(1, 7, 3)).status, 401);
  EXPECT_EQ(Call("GET", "/v1/value/blog_posts/7/3", {}, "Bearer pw").body,
            R"({"key":"blog_posts:7:3","value":0})");

  // Open without it: the probes, the dashboard's files, the API's description.
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
  EXPECT_EQ(Call("GET", "/").status, 200);
  EXPECT_EQ(Call("GET", "/openapi.json").status, 200);
  // Subscriptions also take it as ?token=.
  EXPECT_EQ(Call("GET", "/v1/events?key=a").status, 401);
  EXPECT_EQ(Call("GET", "/v1/events?key=a&token=nope").status, 401);
  EXPECT_EQ(Call("GET", "/v1/events?key=a&token=pw").status, 200);

  // /metrics needs it unless told otherwise.
  metrics::Registry registry;
  servers::Services services = Parts();
  services.metrics = &registry;
  Serve(services, ApiOptions{.password = "pw"});
  EXPECT_EQ(Call("GET", "/metrics").status, 401);
  Serve(services, ApiOptions{.password = "pw", .public_metrics = true});
  EXPECT_EQ(Call("GET", "/metrics").status, 200);
}

TEST(HttpAuthTest, CredentialsAreBearerOrBasic) {
  auto credentials = ParseAuthorization("Bearer pw");
  ASSERT_TRUE(credentials);
  EXPECT_EQ((std::pair{credentials->user, credentials->password}), std::pair("default"s, "pw"s));
  EXPECT_FALSE(credentials->whole);
  credentials = ParseAuthorization("Bearer alice:a:b");
  ASSERT_TRUE(credentials);
  EXPECT_EQ((std::pair{credentials->user, credentials->password}), std::pair("alice"s, "a:b"s));
  EXPECT_EQ(credentials->whole, "alice:a:b");  // or the default user's password
  // Basic: base64 of user:password, with the padding its length needs (none, one or two '=').
  for (const auto& [header, user, password] :
       {std::tuple{"Basic YWxpY2U6cHc="sv, "alice"sv, "pw"sv},
        std::tuple{"Basic Ym9iOnB3"sv, "bob"sv, "pw"sv},
        std::tuple{"Basic YWxpY2U6cHcx"sv, "alice"sv, "pw1"sv},
        std::tuple{"Basic YTpwd2Q="sv, "a"sv, "pwd"sv}, std::tuple{"Basic YTp4"sv, "a"sv, "x"sv},
        std::tuple{"Basic YTp4eQ=="sv, "a"sv, "xy"sv}}) {
    credentials = ParseAuthorization(header);
    ASSERT_TRUE(credentials) << header;
    EXPECT_EQ(credentials->user, user) << header;
    EXPECT_EQ(credentials->password, password) << header;
  }
  EXPECT_FALSE(ParseAuthorization("Basic YTp4eQ"));        // padding missing
  EXPECT_FALSE(ParseAuthorization("Basic YTp4e!=="));      // not base64
  EXPECT_FALSE(ParseAuthorization("Basic bm9jb2xvbg=="));  // "nocolon"
  EXPECT_FALSE(ParseAuthorization("Digest x"));
}

TEST_F(ApiTest, UsersAreCheckedPerRouteAndKey) {
  Define();
  // The commands the routes name, with Redis's categories.
  auth::Acl acl({{"counter.get", auth::kRead},
                 {"counter.scan", auth::kRead},
                 {"counter.top", auth::kRead},
                 {"counter.range", auth::kRead},
                 {"counter.list", auth::kRead},
                 {"counter.push", auth::kWrite | auth::kPush},
                 {"counter.define", auth::kWrite | auth::kDefinitions},
                 {"dbsize", auth::kRead},
                 {"scan", auth::kRead},
                 {"info", auth::kDangerous},
                 {"subscribe", auth::kPubSub}},
                "root-pw");
  acl.set_max_auth_failures(3);
  ASSERT_TRUE(acl.SetUser(
      "viewer", std::vector<std::string>{"on", ">v-pw", "~blog_posts:7:*", "+@read", "+@pubsub"}));
  servers::Services services = Parts();
  services.acl = &acl;
  Serve(services);
  const std::string viewer = "Basic " + std::string("dmlld2VyOnYtcHc=");  // viewer:v-pw
  EXPECT_EQ(Call("GET", "/v1/status").status, 401);
  EXPECT_EQ(Call("GET", "/v1/status", {}, "Bearer root-pw").status, 200);
  EXPECT_EQ(Call("GET", "/v1/status", {}, "Bearer viewer:v-pw").status, 200);
  EXPECT_EQ(Call("GET", "/v1/status", {}, viewer).status, 200);
  EXPECT_EQ(Call("GET", "/v1/value/blog_posts/7/3", {}, viewer).body,
            R"({"key":"blog_posts:7:3","value":0})");
  EXPECT_EQ(Call("GET", "/v1/top/blog_posts/7", {}, viewer).status, 200);
  // Keys outside ~blog_posts:7:*, on every route that reads counters.
  const std::string refused = R"({"error":"NOPERM No permissions to access a key"})";
  for (const std::string_view target :
       {"/v1/value/blog_posts/8/3", "/v1/top/blog_posts", "/v1/list/blog_posts/8",
        "/v1/range/blog_posts/7?from=0&to=1", "/v1/events?key=blog_posts:8:3",
        "/v1/events?prefix=blog_posts:"}) {
    const ApiResponse response = Call("GET", target, {}, viewer);
    EXPECT_EQ(response.status, 403) << target;
    EXPECT_EQ(response.body, refused) << target;
  }
  EXPECT_EQ(
      Call("POST", "/v1/values", R"({"counter":"blog_posts","keys":[[7,1],[8,1]]})", viewer).body,
      refused);
  // Commands outside +@read.
  ApiResponse response = Call("POST", "/v1/changes", Post(1, 7, 3), viewer);
  EXPECT_EQ(response.status, 403);
  EXPECT_EQ(
      response.body,
      R"({"error":"NOPERM User viewer has no permissions to run the 'counter.push' command"})");
  EXPECT_EQ(Call("GET", "/metrics", {}, viewer).status, 403);
  // Each refusal is in ACL LOG, the newest first.
  const auto log = acl.LogEntries(2);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ((std::tuple{log[1].reason, log[1].object, log[1].username}),
            std::tuple("command"s, "counter.push"s, "viewer"s));
  EXPECT_EQ(log[1].client, "addr=10.0.0.1 http=POST /v1/changes");
  EXPECT_EQ(log[0].object, "info");

  // A malformed header is refused, never taken as no credentials.
  EXPECT_EQ(Call("GET", "/v1/status", {}, "Basic !!!!").status, 401);
  // A connection remembers what it accepted: past the address's limit on failed passwords,
  // its credentials still work, and no one else's are checked.
  AuthCache cache;
  EXPECT_EQ(Call("GET", "/v1/status", {}, viewer, &cache).status, 200);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Call("GET", "/v1/status", {}, "Bearer x").status, 401);
  response = Call("GET", "/v1/status", {}, "Bearer root-pw");
  EXPECT_EQ(response.status, 429);
  EXPECT_EQ(response.body, fmt::format(R"({{"error":"{}"}})", auth::kTooManyAuthFailures));
  EXPECT_EQ(Call("GET", "/v1/status", {}, viewer, &cache).status, 200);
  // Until a user changes.
  ASSERT_TRUE(acl.SetUser("viewer", std::vector<std::string>{"-dbsize"}));
  EXPECT_EQ(Call("GET", "/v1/status", {}, viewer, &cache).status, 429);
}

TEST_F(ApiTest, ResponsesAreCountedByRouteAndClass) {
  Call("GET", "/healthz");
  Call("GET", "/healthz");
  Call("GET", "/nowhere");
  metrics::Registry registry;
  registry.AddCollector("tally_http_requests_total", "Responses.", metrics::Type::kCounter,
                        [this](metrics::SampleWriter& out) { requests_.Collect(out); });
  const std::string text = registry.Render();
  EXPECT_NE(text.find(R"(tally_http_requests_total{method="GET",route="/healthz",code="2xx"} 2)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(tally_http_requests_total{method="",route="",code="4xx"} 1)"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace tally::http
