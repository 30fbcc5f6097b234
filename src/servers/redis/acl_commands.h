// The Redis server's side of the ACL (servers/auth/acl.h): the categories of its commands,
// and the check the dispatcher makes before a command runs.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "servers/auth/acl.h"
#include "servers/redis/command_table.h"

namespace tally::redis {

// Every command of the table (AllCommands(), same order: ids are indexes) with its ACL
// categories, for building the node's Acl.
std::vector<auth::CommandInfo> AclCommandInfo();

// The categories of one command: from its flags (@read, @write, @admin, @fast...) and
// group (@string, @keyspace, @pubsub, @connection, @transaction), tally's own for the
// derived counters (@definitions, @push), @dangerous as Redis has it.
uint32_t CategoriesOf(const CommandSpec& spec);

// What a user may not do with a request, if anything.
struct Refusal {
  std::string_view reason;  // "command" or "key" (ACL LOG's words)
  std::string object;       // the command's name or the key
};
// Checks `user` against a validated request: the command (ACL WHOAMI and CAT are everyone's),
// then its keys (read and/or write as the command uses them; SUBSCRIBE's channels are keys
// to read; commands over the whole keyspace need every key). `key_positions` are the
// request's key arguments.
std::optional<Refusal> CheckPermission(const auth::User& user, const CommandSpec& spec,
                                       std::span<const std::string_view> args,
                                       std::span<const size_t> key_positions);

}  // namespace tally::redis
