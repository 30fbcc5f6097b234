#include "servers/http/router.h"

#include <fmt/format.h>

#include <algorithm>

namespace tally::http {
namespace {

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(separator, start), text.size());
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

bool IsParameter(std::string_view segment) {
  return segment.size() >= 2 && segment.front() == '{' && segment.back() == '}';
}

}  // namespace

Router::Router(const std::vector<RoutePattern>& routes) {
  for (const RoutePattern& pattern : routes) {
    Compiled route{pattern, Split(pattern.path, '/'), false, Split(pattern.query, ' '), {}};
    for (std::string_view& name : route.query_names) {
      if (!name.ends_with('*')) continue;
      name.remove_suffix(1);
      route.repeatable.push_back(name);
    }
    // The root's target has one empty segment (see RequestTarget).
    if (pattern.path == "/") route.segments = {""};
    if (!route.segments.empty() && route.segments.back() == "*") {
      route.rest = true;
      route.segments.pop_back();
    }
    routes_.push_back(std::move(route));
  }
}

bool Router::PathFits(const Compiled& route, const std::vector<std::string_view>& segments) {
  if (route.rest ? segments.size() < route.segments.size()
                 : segments.size() != route.segments.size()) {
    return false;
  }
  for (size_t i = 0; i < route.segments.size(); ++i) {
    if (!IsParameter(route.segments[i]) && route.segments[i] != segments[i]) return false;
  }
  return true;
}

RouteMatch Router::Match(std::string_view method, const RequestTarget& target) const {
  RouteMatch match;
  const Compiled* found = nullptr;
  std::vector<std::string_view> allowed;
  for (size_t i = 0; i < routes_.size(); ++i) {
    const Compiled& route = routes_[i];
    if (!PathFits(route, target.segments)) continue;
    if (route.pattern.method == method) {
      found = &route;
      match.route = i;
      break;
    }
    if (std::find(allowed.begin(), allowed.end(), route.pattern.method) == allowed.end()) {
      allowed.push_back(route.pattern.method);
    }
  }
  if (found == nullptr) {
    if (allowed.empty()) {
      match.kind = RouteMatch::Kind::kNotFound;
    } else {
      match.kind = RouteMatch::Kind::kWrongMethod;
      for (std::string_view name : allowed) {
        if (!match.allow.empty()) match.allow += ", ";
        match.allow += name;
      }
    }
    return match;
  }

  for (size_t i = 0; i < target.query.size(); ++i) {
    const std::string& name = target.query[i].first;
    const auto& names = found->query_names;
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      match.kind = RouteMatch::Kind::kBadRequest;
      match.error = names.empty()
                        ? fmt::format("unknown query parameter \"{}\": this route takes none", name)
                        : fmt::format("unknown query parameter \"{}\" (this route takes: {})", name,
                                      fmt::join(names, ", "));
      return match;
    }
    const auto& repeatable = found->repeatable;
    if (std::find(repeatable.begin(), repeatable.end(), name) != repeatable.end()) continue;
    for (size_t j = 0; j < i; ++j) {
      if (target.query[j].first == name) {
        match.kind = RouteMatch::Kind::kBadRequest;
        match.error = fmt::format("query parameter \"{}\" given twice", name);
        return match;
      }
    }
  }

  for (size_t i = 0; i < target.segments.size(); ++i) {
    if (i < found->segments.size() && !IsParameter(found->segments[i])) continue;
    auto decoded = PercentDecode(target.segments[i], /*plus_is_space=*/false);
    if (!decoded) {
      match.kind = RouteMatch::Kind::kBadRequest;
      match.error = "path: " + decoded.error().message;
      return match;
    }
    match.params.push_back(std::move(*decoded));
  }
  match.kind = RouteMatch::Kind::kFound;
  return match;
}

}  // namespace tally::http
