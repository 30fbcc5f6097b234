// libFuzzer target for the HTTP API's handling of what a client sends: the input is the byte
// stream of one connection. It goes through Beast's request parser with tallyd's limits
// (HttpOptions: header and body limits), request after request as HttpConnection feeds it,
// and every complete request, its headers taken as HttpConnection takes them, goes to an Api
// over an Engine and DerivedCounters on a store that forgets (null_store.h), with a few
// counters defined and a few changes pushed: request target, router, and every route's
// handler, including the bodies of pushes and definitions. Properties of each response:
//   - no 500: a handler never throws, and no error of the engine is an internal one;
//   - a JSON response is valid JSON, an error's an object with an "error" string;
//   - 405 names the allowed methods, 401 asks for the scheme;
//   - a subscription is accepted only with a 200.
// Each request goes first to an Api with a password: without the right Authorization header
// it writes nothing and only GET routes answer 200 (those that need no password, and the
// subscriptions given the password as ?token=); then to one without.
// The server lives across inputs; after each, its definitions are put back as they were.
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "engine/definitions/lexer.h"
#include "engine/derived/derived_counters.h"
#include "engine/engine.h"
#include "fuzz_check.h"
#include "null_store.h"
#include "servers/http/connection.h"
#include "servers/http/http_options.h"
#include "servers/http/routes.h"
#include "servers/services.h"

namespace tally::http {
namespace {

namespace bhttp = boost::beast::http;
using fuzz::Check;

constexpr std::string_view kDefinitions = R"(
  CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, rating bigint,
                       is_published boolean, is_deleted boolean, created_at timestamp, title text);
  CREATE COUNTER blog_posts AS SELECT user_id, blog_id, count(*) FROM posts
    WHERE is_published AND NOT is_deleted GROUP BY user_id, blog_id;
  CREATE COUNTER author_rating AS SELECT user_id, blog_id, sum(rating) FROM posts
    WHERE is_published AND NOT is_deleted GROUP BY user_id, blog_id;
  CREATE COUNTER posts_per_day AS SELECT blog_id, date_trunc('day', created_at) AS day, count(*)
    FROM posts GROUP BY blog_id, day WITH (retention = '30 days');
  CREATE COUNTER titles AS SELECT title, count(*) FROM posts GROUP BY title;
)";

constexpr std::string_view kChanges = R"(
  {"source": "posts", "new": {"id": 1, "user_id": 7, "blog_id": 3, "rating": 5,
   "is_published": true, "is_deleted": false, "created_at": "2024-05-01T13:45:00Z", "title": "a:b"}}
  {"source": "posts", "new": {"id": 2, "user_id": 8, "blog_id": 3, "rating": -2,
   "is_published": true, "is_deleted": false, "created_at": "2024-04-30T00:00:00Z", "title": "\\N"}}
)";

constexpr std::string_view kPassword = "secret";

// An Engine and DerivedCounters over a NullStore, the clock at 2024-05-02, and two Apis.
// Made once: starting an engine per input would cost more than the input.
class Server {
 public:
  Server() {
    engine_ = std::make_unique<engine::Engine>(&store_, engine::EngineOptions{.clock = &clock_});
    Check(engine_->Start().has_value(), "the engine starts");
    derived_ =
        std::make_unique<derived::DerivedCounters>(*engine_, store_, derived::DerivedOptions{});
    Check(derived_->Load().has_value(), "the derived counters load");
    Define();
    derived::ChangeDecoder decoder;
    auto pushed = derived_->Push(kChanges, "", decoder);
    Check(pushed.has_value(), "the changes apply", pushed ? "" : pushed.error().message);
    for (const auto& counter : derived_->Counters()) counters_.push_back(counter.sql);
    servers::Services services(*engine_);
    services.derived = derived_.get();
    open = std::make_unique<Api>(services);
    locked = std::make_unique<Api>(services, ApiOptions{.password = std::string(kPassword)});
  }

  // Puts the definitions back as they were made, after an input that changed them. (Counter
  // values and remembered ids stay: an input may meet those of earlier ones.)
  void Restore() {
    const auto counters = derived_->Counters();
    const auto sources = derived_->Sources();
    bool same = counters.size() == counters_.size() && sources.size() == 1;
    for (size_t i = 0; same && i < counters.size(); ++i) same = counters[i].sql == counters_[i];
    if (same) return;  // the usual case; nothing to parse
    for (const auto& counter : counters) {
      if (std::find(counters_.begin(), counters_.end(), counter.sql) == counters_.end()) {
        Check(derived_->Drop(counter.name).has_value(), "a counter drops", counter.name);
      }
    }
    for (const auto& source : sources) {
      if (source.name == "posts") continue;
      auto dropped = derived_->Execute("DROP SOURCE " + definitions::QuoteIdentifier(source.name));
      Check(dropped.has_value(), "a source drops", source.name);
    }
    if (derived_->Execute(kDefinitions)) return;
    // posts itself was dropped and made again, otherwise.
    for (const auto& counter : derived_->Counters()) {
      Check(derived_->Drop(counter.name).has_value(), "a counter drops", counter.name);
    }
    Check(derived_->Execute("DROP SOURCE posts").has_value(), "posts drops");
    Define();
  }

  std::unique_ptr<Api> open;
  std::unique_ptr<Api> locked;

 private:
  void Define() {
    auto defined = derived_->Execute(kDefinitions);
    Check(defined.has_value(), "the definitions apply", defined ? "" : defined.error().message);
  }

  fuzz::NullStore store_;
  ManualClock clock_{1714608000000};
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<derived::DerivedCounters> derived_;
  std::vector<std::string> counters_;  // the CREATE COUNTER of each, as listed
};

void CheckResponse(const ApiResponse& response, const ApiRequest& request) {
  const std::string_view target = request.target;
  Check(response.status != 500, "no internal error", response.body);
  Check(response.status >= 200 && response.status <= 599, "a status is an HTTP status", target);
  if (response.status == 405) Check(!response.allow.empty(), "405 names the allowed methods");
  if (response.status == 401) Check(response.authenticate, "401 asks for the scheme");
  if (response.subscription) {
    // No body: the connection streams instead.
    Check(response.status == 200, "a subscription is accepted with 200");
    return;
  }
  if (response.content_type != "application/json") return;
  static simdjson::dom::parser parser;
  simdjson::dom::element json;
  Check(!parser.parse(response.body).get(json), "a JSON response is JSON", response.body);
  if (response.status >= 400) {
    std::string_view error;
    Check(!json["error"].get(error), "an error response has an \"error\" string", response.body);
  }
}

void FuzzConnection(Server& server, std::string_view stream) {
  const HttpOptions limits;
  while (!stream.empty()) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(limits.max_header_bytes);
    parser.body_limit(limits.max_body_bytes);
    boost::system::error_code error;
    while (!stream.empty() && !parser.is_done()) {
      const size_t used = parser.put(boost::asio::buffer(stream.data(), stream.size()), error);
      stream.remove_prefix(used);
      if (error || used == 0) break;
    }
    // need_more: the rest of the request never comes (a connection would time out); any
    // other error: the connection answers 400, 413 or 431 and closes.
    if (!parser.is_done()) return;
    const auto& request = parser.get();
    const ApiRequest api_request = ApiRequestOf(request);
    const ApiResponse locked = server.locked->Handle(api_request);
    CheckResponse(locked, api_request);
    if (api_request.authorization != "Bearer secret") {
      Check(!locked.wrote && (locked.status != 200 || api_request.method == "GET"),
            "without the password only GET routes answer", api_request.target);
    }
    CheckResponse(server.open->Handle(api_request), api_request);
    if (!request.keep_alive()) return;
  }
}

}  // namespace
}  // namespace tally::http

// No leak checks: the server lives across inputs, and its keyspace keeps the keys of long
// names in pages of its own (mmap), which LeakSanitizer does not scan, so every such key
// would look leaked. The unit tests under ASan (make check-asan) check these paths for leaks.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // the server's log lines are not findings
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Never destroyed: its threads would outlive the statics they use at exit.
  static auto* server = new tally::http::Server();
  tally::http::FuzzConnection(*server, std::string_view(reinterpret_cast<const char*>(data), size));
  server->Restore();
  return 0;
}
