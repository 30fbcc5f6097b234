#include "servers/http/http_auth.h"

#include <fmt/format.h>

#include <boost/beast/core/detail/base64.hpp>

#include "servers/http/request_target.h"
#include "servers/http/routes.h"

namespace tally::http {
namespace {

constexpr std::string_view kKeyRefused = "NOPERM No permissions to access a key";

// Standard base64 with its padding; none for anything else (a stray character, a length
// that no encoding has).
std::optional<std::string> DecodeBase64(std::string_view encoded) {
  std::string_view data = encoded;
  for (int pad = 0; pad < 2 && data.ends_with('='); ++pad) data.remove_suffix(1);
  if (encoded.size() % 4 != 0) return std::nullopt;
  std::string decoded(boost::beast::detail::base64::decoded_size(data.size()) + 3, '\0');
  const auto [written, read] =
      boost::beast::detail::base64::decode(decoded.data(), data.data(), data.size());
  if (read != data.size()) return std::nullopt;
  decoded.resize(written);
  return decoded;
}

}  // namespace

Credentials TokenCredentials(std::string_view token) {
  const size_t colon = token.find(':');
  if (colon == std::string_view::npos) return Credentials{"default", std::string(token), {}};
  return Credentials{std::string(token.substr(0, colon)), std::string(token.substr(colon + 1)),
                     std::string(token)};
}

std::optional<Credentials> ParseAuthorization(std::string_view header) {
  if (header.starts_with("Bearer ")) return TokenCredentials(header.substr(7));
  if (!header.starts_with("Basic ")) return std::nullopt;
  const std::optional<std::string> decoded = DecodeBase64(header.substr(6));
  if (!decoded) return std::nullopt;
  const size_t colon = decoded->find(':');
  if (colon == std::string::npos) return std::nullopt;
  return Credentials{decoded->substr(0, colon), decoded->substr(colon + 1), {}};
}

std::optional<ApiResponse> Api::Authorize(const ApiRequest& request, const RequestTarget& target,
                                          std::string_view command) {
  AuthCache* cache = request.auth_cache;
  if (cache != nullptr && cache->user != nullptr && !request.authorization.empty() &&
      cache->acl_version == acl_->version() && cache->authorization == request.authorization) {
    user_ = cache->user;
  } else if (auto refused = Authenticate(request, target)) {
    return refused;
  }
  if (!user_->unrestricted()) {
    const int id = acl_->CommandId(command);
    if (id >= 0 && !user_->CanRun(static_cast<size_t>(id))) {
      LogRefusal(request, "command", std::string(command));
      return ErrorResponse(403, fmt::format("NOPERM User {} has no permissions to run the '{}' "
                                            "command",
                                            user_->name(), command));
    }
  }
  return std::nullopt;
}

std::optional<ApiResponse> Api::Authenticate(const ApiRequest& request,
                                             const RequestTarget& target) {
  std::optional<Credentials> credentials;
  if (!request.authorization.empty()) {
    credentials = ParseAuthorization(request.authorization);
    if (!credentials) {
      ApiResponse response = ErrorResponse(
          401,
          "malformed Authorization: send Bearer <password>, Bearer <user>:<password> or "
          "Basic <base64 of user:password>");
      response.authenticate = true;
      return response;
    }
  } else {
    // Only the subscription routes take ?token= (the router refuses it elsewhere).
    for (const auto& [name, value] : target.query) {
      if (name == "token") credentials = TokenCredentials(value);
    }
  }
  if (!credentials) {
    user_ = acl_->OpenDefault();
    if (user_ != nullptr) return std::nullopt;
    ApiResponse response =
        ErrorResponse(401, "authentication required: send Authorization: Bearer <password>");
    response.authenticate = true;
    return response;
  }
  const int64_t now = engine_.keyspace().clock()->NowMillis();
  if (acl_->AuthBlocked(request.client_address, now)) {
    LogRefusal(request, "auth", "AUTH", credentials->user);
    return ErrorResponse(429, auth::kTooManyAuthFailures);
  }
  user_ = acl_->Authenticate(credentials->user, credentials->password);
  if (user_ == nullptr && credentials->whole) {
    user_ = acl_->Authenticate("default", *credentials->whole);
  }
  if (user_ == nullptr) {
    acl_->AuthFailed(request.client_address, now);
    LogRefusal(request, "auth", "AUTH", credentials->user);
    ApiResponse response = ErrorResponse(401, "invalid password");
    response.authenticate = true;
    return response;
  }
  if (request.auth_cache != nullptr && !request.authorization.empty()) {
    *request.auth_cache = AuthCache{std::string(request.authorization), acl_->version(), user_};
  }
  return std::nullopt;
}

void Api::LogRefusal(const ApiRequest& request, std::string_view reason, std::string object,
                     std::string_view username) {
  // A refused password names no user when the credentials gave none (Bearer ":pw"): then
  // it was the default user's, and user_ is null.
  const std::string_view name = !username.empty()  ? username
                                : user_ != nullptr ? std::string_view(user_->name())
                                                   : std::string_view("default");
  RefusalLogger(request, name)(reason, std::move(object));
}

std::function<void(std::string_view reason, std::string object)> Api::RefusalLogger(
    const ApiRequest& request, std::string_view username) {
  const std::string_view path = request.target.substr(0, request.target.find('?'));
  return [acl = acl_, clock = engine_.keyspace().clock(), username = std::string(username),
          client = fmt::format("addr={} http={} {}", request.client_address, request.method, path)](
             std::string_view reason, std::string object) {
    auth::AclLogEntry entry;
    entry.reason = std::string(reason);
    entry.context = "toplevel";
    entry.object = std::move(object);
    entry.username = username;
    entry.client = client;
    acl->Log(std::move(entry), clock->NowMillis());
  };
}

bool Api::MayRead(std::string_view key) const {
  return user_ == nullptr || user_->unrestricted() || user_->CanAccess(key, auth::kReadKey);
}

bool Api::MayReadPrefix(std::string_view prefix) const {
  return user_ == nullptr || user_->unrestricted() || user_->CanReadPrefix(prefix);
}

std::optional<ApiResponse> Api::RefuseRead(const ApiRequest& request, std::string_view key,
                                           bool prefix) {
  if (prefix ? MayReadPrefix(key) : MayRead(key)) return std::nullopt;
  LogRefusal(request, "key", prefix ? std::string(key) + "*" : std::string(key));
  return ErrorResponse(403, kKeyRefused);
}

}  // namespace tally::http
