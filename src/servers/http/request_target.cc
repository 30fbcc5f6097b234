#include "servers/http/request_target.h"

#include <fmt/format.h>

namespace tally::http {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<std::string> PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      const int high = i + 1 < text.size() ? HexDigit(text[i + 1]) : -1;
      const int low = i + 2 < text.size() ? HexDigit(text[i + 2]) : -1;
      if (high < 0 || low < 0) {
        return InvalidArgument(fmt::format("bad percent-encoding at byte {} of \"{}\"", i, text));
      }
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<RequestTarget> ParseRequestTarget(std::string_view target) {
  if (target.empty() || target.front() != '/') {
    return InvalidArgument("the request target must be a path starting with '/'");
  }
  RequestTarget result;
  const size_t question = target.find('?');
  const std::string_view path =
      target.substr(1, question == std::string_view::npos ? std::string_view::npos : question - 1);
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      result.segments.push_back(path.substr(start));
      break;
    }
    result.segments.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  if (question == std::string_view::npos) return result;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t equals = pair.find('=');
    auto name = PercentDecode(pair.substr(0, equals), /*plus_is_space=*/true);
    if (!name) return tl::unexpected(name.error());
    std::string value;
    if (equals != std::string_view::npos) {
      auto decoded = PercentDecode(pair.substr(equals + 1), /*plus_is_space=*/true);
      if (!decoded) return tl::unexpected(decoded.error());
      value = std::move(*decoded);
    }
    result.query.emplace_back(std::move(*name), std::move(value));
  }
  return result;
}

}  // namespace tally::http
