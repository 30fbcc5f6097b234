// Router: the HTTP API's routes as a table of (method, path pattern, query parameters),
// matched once, centrally, before any handler runs: an unknown path is 404, a known path
// with another method 405 (with the methods it takes), an unexpected or repeated query
// parameter 400. Handlers see only requests that fit their route.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "servers/http/request_target.h"

namespace tally::http {

// One route. `path` is '/'-separated segments: a literal ("v1"), "{name}" (any one
// segment) or, last, "*" (zero or more further segments); "/" alone is the root. `query`
// lists the query parameters the route takes, space-separated ("cursor limit"); a name
// ending in "*" may be given more than once ("key* prefix*").
struct RoutePattern {
  std::string_view method;
  std::string_view path;
  std::string_view query;
};

struct RouteMatch {
  enum class Kind {
    kFound,        // `route` and `params` are set
    kNotFound,     // no route has this path
    kWrongMethod,  // `allow` lists the methods the path takes: "GET, DELETE"
    kBadRequest,   // `error` says what: bad percent-encoding, unknown query parameter
  };
  Kind kind = Kind::kNotFound;
  size_t route = 0;  // index in the table
  // The "{name}" segments then the "*" segments, percent-decoded, in path order.
  std::vector<std::string> params;
  std::string allow;
  std::string error;
};

class Router {
 public:
  explicit Router(const std::vector<RoutePattern>& routes);

  // Matches a request. The first route in table order whose path and method fit wins.
  RouteMatch Match(std::string_view method, const RequestTarget& target) const;

 private:
  struct Compiled {
    RoutePattern pattern;
    std::vector<std::string_view> segments;     // the path's, without a final "*"
    bool rest = false;                          // ends with "*"
    std::vector<std::string_view> query_names;  // without the "*"
    std::vector<std::string_view> repeatable;   // the names that had one
  };
  static bool PathFits(const Compiled& route, const std::vector<std::string_view>& segments);

  std::vector<Compiled> routes_;
};

}  // namespace tally::http
