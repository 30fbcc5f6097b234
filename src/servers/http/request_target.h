// The request target of an HTTP request ("/v1/list/blog_posts/7?limit=10"): its path
// segments and its query parameters.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tally::http {

// Percent-decodes `text` (RFC 3986 section 2.1). With `plus_is_space`, '+' decodes to a
// space, as in HTML form encoding (query strings); a literal '+' is then "%2B". Fails
// on a '%' not followed by two hex digits. Any byte may result, '/' and NUL included.
Result<std::string> PercentDecode(std::string_view text, bool plus_is_space);

struct RequestTarget {
  // The path's segments between '/'s, still percent-encoded: "/a/b%2Fc/" is
  // {"a", "b%2Fc", ""}, and "/" is {""}.
  std::vector<std::string_view> segments;
  // The query's name=value pairs, decoded, in order; "a&b=" gives {"a", ""}, {"b", ""}.
  std::vector<std::pair<std::string, std::string>> query;
};

// Splits an origin-form target ("/path?query"; a fragment is not expected and stays in
// the query). Views point into `target`. Fails on another form or bad percent-encoding
// in the query.
Result<RequestTarget> ParseRequestTarget(std::string_view target);

}  // namespace tally::http
