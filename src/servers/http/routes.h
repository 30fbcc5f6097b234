// Api: the routes of tally's HTTP API and their handlers, over DerivedCounters. It knows
// nothing of sockets or of HTTP framing: a connection hands it a request's method,
// target, idempotency key and body, and sends back the response it returns, once the
// commit epoch the response depends on is durable.
//
//   POST   /v1/changes                     push changes (one, a JSON array, or JSON lines)
//   POST   /v1/backfill/{counter}          push changes to one counter only
//   GET    /v1/value/{counter}/{part}...   one counter value
//   POST   /v1/values                      many values of one counter
//   GET    /v1/list/{counter}/{part}...    the groups under a key prefix, paged
//   GET    /v1/top/{counter}/{part}...     the k largest groups under a key prefix
//   GET    /v1/range/{counter}/{part}...   the sum of a group's time buckets, ?from=&to=
//   POST   /v1/definitions                 run a script of CREATE/DROP statements
//   GET    /v1/definitions                 the sources and counters defined
//   DELETE /v1/definitions/{counter}       DROP COUNTER
//   GET    /v1/status                      durability, counters, and the --source figures
//   GET    /v1/cluster                     a cluster node's view of its cluster (cluster_json.h)
//   GET    /healthz                        liveness (503 while commits fail)
//   GET    /readyz                         readiness: 200, or 503 and why (see GetReady)
//   GET    /metrics                        Prometheus text format 0.0.4 (core/metrics.h)
//   GET    /v1/hot                         the most-written counters of the last minute
//   GET    /v1/events?key=&prefix=         live values as Server-Sent Events
//   GET    /v1/subscribe?key=&prefix=      live values over a WebSocket
//   GET    /, /assets/...                  the web dashboard (dashboard_assets.h)
//   GET    /openapi.json                   this table as OpenAPI 3.1 (openapi.h)
//
// Who may use a route: the node's users (services.acl; see http_auth.h for the credentials),
// or without them the default user, whose password is ApiOptions::password (tallyd's
// --requirepass). Each route needs the permission of the Redis command that does the same
// (kRoutes' `command`), and the routes that read counters need read access to their keys.
// Open to everyone without credentials: /healthz and /readyz (a probe sends none; they
// reveal nothing), the dashboard's files (the page asks for a password and sends it with its
// data calls), /openapi.json, and /metrics when ApiOptions::public_metrics says so. Refused
// credentials answer 401, a refused permission 403 with Redis's -NOPERM text, and an address
// past its failed-password limit 429. Passwords are compared as SHA-256 digests in constant
// time.
//
// Every API response body is JSON; an error is {"error": "..."} with a status from its kind.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/metrics.h"
#include "engine/derived/derived_counters.h"
#include "engine/engine.h"
#include "servers/auth/acl.h"
#include "servers/http/http_auth.h"
#include "servers/services.h"

namespace tally::http {

struct RequestTarget;  // request_target.h

class Router;

// Responses counted by route and status class, for tally_http_requests_total. One per
// server, shared by its Apis and connections: Count() from any thread without a lock.
class ApiRequestCounts {
 public:
  ApiRequestCounts();
  ~ApiRequestCounts();
  // `route`: the route's index in the Api's table, or -1 when none matched (or the request
  // never reached the Api: malformed, too large, refused).
  void Count(int route, int status);
  // tally_http_requests_total{method,route,code} of every non-zero count; method and route
  // empty (absent) for -1; code "2xx" and so on.
  void Collect(metrics::SampleWriter& out) const;

 private:
  static constexpr int kClasses = 5;  // 1xx .. 5xx
  const size_t routes_;
  std::unique_ptr<metrics::Counter[]> counts_;  // (routes_ + 1) * kClasses; the last row: -1
};

// The Api's settings beyond its Services.
struct ApiOptions {
  // tallyd's --requirepass: without services.acl, the default user's password (then
  // requests need "Authorization: Bearer <password>"; see the routes above for the
  // exceptions). With services.acl, unused: the Acl has it.
  std::string password;
  bool public_metrics = false;           // GET /metrics needs no password
  ApiRequestCounts* requests = nullptr;  // counts every response Handle() returns
};

struct ApiRequest {
  std::string_view method;  // "GET", "POST", ... as sent
  std::string_view target;  // "/v1/list/blog_posts/7?limit=10"
  bool has_idempotency_key = false;
  std::string_view idempotency_key;  // the Idempotency-Key header
  std::string_view body;
  std::string_view authorization;   // the Authorization header; empty when absent
  std::string_view client_address;  // the client's IP: failed passwords are counted by it
  bool websocket_upgrade = false;   // the request asks to become a WebSocket
  std::string_view if_none_match;   // the If-None-Match header; empty when absent
  // The connection's memory of its accepted credentials (http_auth.h); null: none.
  AuthCache* auth_cache = nullptr;
};

// What a subscription route accepted: the connection then streams these keys' values
// (see SubscriptionStream) instead of sending a response.
struct SubscriptionRequest {
  bool websocket = false;  // else Server-Sent Events
  std::vector<std::string> keys;
  std::vector<std::string> prefixes;
  // The user whose key patterns a WebSocket's later {"subscribe": ...} must pass; null when
  // it may read every key.
  std::shared_ptr<const auth::User> restricted_to;
  // With restricted_to: logs a later refusal of `object` (a key, or a prefix and '*') in ACL
  // LOG, as the route's own refusals are (the user, the client, the route).
  std::function<void(std::string object)> log_refusal;
};

struct ApiResponse {
  int status = 200;
  std::string body;  // JSON unless content_type says otherwise
  // The Content-Type header; a static string (a literal).
  std::string_view content_type = "application/json";
  // ETag and Cache-Control headers when not empty; static strings (the dashboard's files).
  std::string_view etag;
  std::string_view cache_control;
  std::string allow;          // 405: the methods the path takes, for the Allow header
  bool authenticate = false;  // 401: send WWW-Authenticate
  // The response may be sent only once this commit epoch is durable (0 = at once).
  uint64_t required_epoch = 0;
  // The request changed counters: in async mode they are written to the commit log
  // before the response leaves, so a process crash cannot lose an acknowledged change.
  bool wrote = false;
  // Set by the subscription routes (status 200): stream instead of responding.
  std::optional<SubscriptionRequest> subscription;
};

// An error response: `status` and the body {"error": message}.
ApiResponse ErrorResponse(int status, std::string_view message);

// One per I/O thread: it keeps that thread's change decoder and JSON parser. Not
// thread-safe; several Apis may share one engine and DerivedCounters.
class Api {
 public:
  // What `services` and `options` point to must outlive the Api. REQUIRES: services.derived.
  // Without services.metrics, GET /metrics is 404; without services.source_report, GET
  // /v1/status has "source": null; services.readiness is GET /readyz's check beyond the
  // store's health.
  explicit Api(servers::Services services, ApiOptions options = {});
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  ApiResponse Handle(const ApiRequest& request);
  // The users the Api checks requests against (services.acl, or its own default user).
  auth::Acl& acl() { return *acl_; }

  // Limits of the listing routes.
  static constexpr int64_t kMaxLimit = 10000;     // ?limit= of /v1/list, ?k= of /v1/top
  static constexpr int64_t kDefaultLimit = 100;   // /v1/list
  static constexpr int64_t kDefaultTopK = 10;     // /v1/top
  static constexpr int64_t kDefaultHotKeys = 10;  // ?n= of /v1/hot

 private:
  struct Call;
  struct Scratch;
  using Handler = ApiResponse (Api::*)(const Call& call);
  struct Route;
  static const Route kRoutes[];
  static const Router& TheRouter();  // built from kRoutes once
  friend class ApiRequestCounts;     // reads kRoutes' names

  // Handle() but for the counting: `route` gets the matched route's index (else -1).
  ApiResponse Dispatch(const ApiRequest& request, int* route);
  // The request's user (into user_), when it may run `command` (a Redis command's name),
  // else the 401, 403 or 429 to answer (http_auth.cc).
  std::optional<ApiResponse> Authorize(const ApiRequest& request, const RequestTarget& target,
                                       std::string_view command);
  // Authorize's first half: who the request is (into user_), or the 401 or 429 to answer.
  // Failed passwords are counted against the client's address and logged (ACL LOG).
  std::optional<ApiResponse> Authenticate(const ApiRequest& request, const RequestTarget& target);
  // Adds a refusal to ACL LOG; `username` empty: user_'s.
  void LogRefusal(const ApiRequest& request, std::string_view reason, std::string object,
                  std::string_view username = {});
  // What LogRefusal does for `request` and `username`, kept for later (a WebSocket's own
  // subscribe messages): it holds copies and the node's Acl and clock, which outlive it.
  std::function<void(std::string_view reason, std::string object)> RefusalLogger(
      const ApiRequest& request, std::string_view username);
  // Whether the request's user may read `key`, or every key that starts with `prefix`.
  bool MayRead(std::string_view key) const;
  bool MayReadPrefix(std::string_view prefix) const;
  // The 403 to answer (logged) when the user may not read `key` (with `prefix`: every key
  // under it), else none.
  std::optional<ApiResponse> RefuseRead(const ApiRequest& request, std::string_view key,
                                        bool prefix);

  // The handlers, in kRoutes' order.
  ApiResponse PostChanges(const Call& call);
  ApiResponse PostBackfill(const Call& call);
  // POST /v1/changes, or with `only_counter` POST /v1/backfill/{counter}.
  ApiResponse Push(const Call& call, std::string_view only_counter);
  ApiResponse GetValue(const Call& call);
  ApiResponse PostValues(const Call& call);
  ApiResponse GetList(const Call& call);
  ApiResponse GetTop(const Call& call);
  ApiResponse GetRange(const Call& call);
  ApiResponse PostDefinitions(const Call& call);
  ApiResponse GetDefinitions(const Call& call);
  ApiResponse DeleteDefinition(const Call& call);
  ApiResponse GetStatus(const Call& call);
  ApiResponse GetCluster(const Call& call);
  ApiResponse GetHealth(const Call& call);     // GET /healthz
  ApiResponse GetReady(const Call& call);      // GET /readyz
  ApiResponse GetMetrics(const Call& call);    // GET /metrics
  ApiResponse GetHot(const Call& call);        // GET /v1/hot
  ApiResponse GetEvents(const Call& call);     // GET /v1/events
  ApiResponse GetSubscribe(const Call& call);  // GET /v1/subscribe
  ApiResponse Subscribe(const Call& call, bool websocket);
  ApiResponse GetPage(const Call& call);   // GET /: the dashboard
  ApiResponse GetAsset(const Call& call);  // GET /assets/...: its scripts and styles
  // GET /openapi.json: the API's description (openapi.h).
  ApiResponse GetOpenApi(const Call& call);

  const servers::Services services_;
  engine::Engine& engine_;
  derived::DerivedCounters& derived_;
  const ApiOptions options_;
  // Without services.acl: the default user with options_.password (no other user exists).
  std::unique_ptr<auth::Acl> own_acl_;
  auth::Acl* acl_;  // services.acl, else own_acl_
  // The user of the request being handled; null on the open routes.
  std::shared_ptr<const auth::User> user_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace tally::http
