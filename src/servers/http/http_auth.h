// Who an HTTP request is and what it may do, by the node's users (servers/auth/acl.h): the
// same users and permissions as the Redis protocol.
//
// Credentials: "Authorization: Bearer <password>" (the default user's, as with
// --requirepass alone), "Bearer <user>:<password>", "Basic <base64 of user:password>", or
// ?token= with a Bearer's value on the subscription routes (a browser's EventSource cannot
// set headers). Without any, a request is the default user when it needs no password.
// Each route needs the permission of the Redis command that does the same (HttpCommandOf).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tally::http {

struct Credentials {
  std::string user = "default";
  std::string password;
};

// The credentials of an Authorization header's value, or none when it is empty or neither
// Bearer nor well-formed Basic.
std::optional<Credentials> ParseAuthorization(std::string_view header);

// A ?token= value: a Bearer's.
Credentials TokenCredentials(std::string_view token);

}  // namespace tally::http
