#include "servers/http/http_auth.h"

#include <boost/beast/core/detail/base64.hpp>

namespace tally::http {

Credentials TokenCredentials(std::string_view token) {
  // "user:password" names a user; a token without a colon is the default user's password.
  // A default password with a colon is still found: the Api tries the whole token too.
  const size_t colon = token.find(':');
  if (colon == std::string_view::npos) return Credentials{"default", std::string(token)};
  return Credentials{std::string(token.substr(0, colon)), std::string(token.substr(colon + 1))};
}

std::optional<Credentials> ParseAuthorization(std::string_view header) {
  if (header.starts_with("Bearer ")) return TokenCredentials(header.substr(7));
  if (!header.starts_with("Basic ")) return std::nullopt;
  const std::string_view encoded = header.substr(6);
  std::string decoded(boost::beast::detail::base64::decoded_size(encoded.size()), '\0');
  const auto [written, read] =
      boost::beast::detail::base64::decode(decoded.data(), encoded.data(), encoded.size());
  if (read != encoded.size()) return std::nullopt;
  decoded.resize(written);
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return std::nullopt;
  return Credentials{decoded.substr(0, colon), decoded.substr(colon + 1)};
}

}  // namespace tally::http
