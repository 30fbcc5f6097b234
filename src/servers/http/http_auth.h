// Who an HTTP request is and what it may do, by the node's users (servers/auth/acl.h): the
// same users and permissions as the Redis protocol.
//
// Credentials: "Authorization: Bearer <password>" (the default user's, as with
// --requirepass alone), "Bearer <user>:<password>", "Basic <base64 of user:password>", or
// ?token= with a Bearer's value on the subscription routes (a browser's EventSource cannot
// set headers). Without any, a request is the default user when it needs no password; a
// header that is neither Bearer nor well-formed Basic is refused (401), never taken as none.
// Each route needs the permission of the Redis command that does the same (Api's route
// table), and the routes that read counters check their keys against the user's patterns.
// Api::Authorize and the key checks are defined in http_auth.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "servers/auth/acl.h"

namespace tally::http {

struct Credentials {
  std::string user = "default";
  std::string password;
  // A Bearer token "a:b" is user a's password b, or else the default user's password "a:b"
  // (a --requirepass with a colon): then `whole` holds the token, tried second.
  std::optional<std::string> whole;
};

// The credentials of an Authorization header's value, or none when it is neither Bearer nor
// well-formed Basic.
std::optional<Credentials> ParseAuthorization(std::string_view header);

// A Bearer token (the header's, or a ?token= value).
Credentials TokenCredentials(std::string_view token);

// What one connection remembers of the last credentials it had accepted: a keep-alive client
// sends the same Authorization header with every request, which is then that user again
// without a password check (nor the failed-password limit of its address), until a user
// changes (the Acl's version moves). A connection's own, on its thread.
struct AuthCache {
  std::string authorization;  // the header's value
  uint64_t acl_version = 0;
  std::shared_ptr<const auth::User> user;
};

}  // namespace tally::http
