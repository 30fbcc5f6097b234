#include "servers/redis/command_table.h"

#include <unordered_map>

namespace tally::redis {
namespace {

using namespace commands;  // NOLINT: the table lists every handler

// clang-format off
constexpr CommandSpec kCommands[] = {
  // name        arity flags                              keys      handler   group  summary  since
  {"incr",        2, kWrite | kFast | kIncrement,          1, 1, 1, Incr,      "string", "Increments a counter by one; a missing counter counts from 0.", "1.0.0"},
  {"decr",        2, kWrite | kFast | kIncrement,          1, 1, 1, Decr,      "string", "Decrements a counter by one.", "1.0.0"},
  {"incrby",      3, kWrite | kFast | kIncrement,          1, 1, 1, IncrBy,    "string", "Adds an integer to a counter.", "1.0.0"},
  {"decrby",      3, kWrite | kFast | kIncrement,          1, 1, 1, DecrBy,    "string", "Subtracts an integer from a counter.", "1.0.0"},
  {"incrbyex",   -5, kWrite | kFast,                       1, 1, 1, IncrByEx,  "string", "Adds an integer to a counter and sets its expiry, atomically (tally).", "tally 0.1"},
  {"get",         2, kReadOnly | kFast,                    1, 1, 1, Get,       "string", "Returns a counter's value.", "1.0.0"},
  {"mget",       -2, kReadOnly | kFast,                    1, -1, 1, MGet,     "string", "Returns the values of several counters.", "1.0.0"},
  {"set",        -3, kWrite,                               1, 1, 1, Set,       "string", "Sets a counter to an integer value.", "1.0.0"},
  {"setnx",       3, kWrite | kFast,                       1, 1, 1, SetNx,     "string", "Sets a counter only when it does not exist.", "1.0.0"},
  {"setex",       4, kWrite,                               1, 1, 1, SetEx,     "string", "Sets a counter and its expiry in seconds.", "2.0.0"},
  {"psetex",      4, kWrite,                               1, 1, 1, PSetEx,    "string", "Sets a counter and its expiry in milliseconds.", "2.6.0"},
  {"mset",       -3, kWrite,                               1, -1, 2, MSet,     "string", "Sets several counters atomically.", "1.0.1"},
  {"msetnx",     -3, kWrite,                               1, -1, 2, MSetNx,   "string", "Sets several counters only when none exists.", "1.0.1"},
  {"getset",      3, kWrite | kFast,                       1, 1, 1, GetSet,    "string", "Sets a counter and returns its old value.", "1.0.0"},
  {"getdel",      2, kWrite | kFast,                       1, 1, 1, GetDel,    "string", "Returns a counter's value and deletes it.", "6.2.0"},
  {"getex",      -2, kWrite | kFast,                       1, 1, 1, GetEx,     "string", "Returns a counter's value and changes its expiry.", "6.2.0"},
  {"del",        -2, kWrite,                               1, -1, 1, Del,      "keyspace", "Deletes counters.", "1.0.0"},
  {"unlink",     -2, kWrite | kFast,                       1, -1, 1, Del,      "keyspace", "Deletes counters.", "4.0.0"},
  {"exists",     -2, kReadOnly | kFast,                    1, -1, 1, Exists,   "keyspace", "Counts how many of the given counters exist.", "1.0.0"},
  {"type",        2, kReadOnly | kFast,                    1, 1, 1, Type,      "keyspace", "Returns the type of a key: string (a counter) or none.", "1.0.0"},
  {"scan",       -2, kReadOnly,                            0, 0, 0, Scan,      "keyspace", "Iterates over the counters' names.", "2.8.0"},
  {"keys",        2, kReadOnly,                            0, 0, 0, Keys,      "keyspace", "Returns all counter names that match a pattern.", "1.0.0"},
  {"dbsize",      1, kReadOnly | kFast,                    0, 0, 0, DbSize,    "server", "Returns the number of counters.", "1.0.0"},
  {"flushall",   -1, kWrite | kAllStripes,                 0, 0, 0, FlushAll,  "server", "Removes every counter of every database.", "1.0.0"},
  {"flushdb",    -1, kWrite | kAllStripes,                 0, 0, 0, FlushDb,   "server", "Removes every counter of the selected database.", "1.0.0"},
  {"move",        3, kWrite | kFast,                       1, 1, 1, Move,      "keyspace", "Not offered: databases are separate keyspaces (copy, then DEL).", "1.0.0"},
  {"swapdb",      3, kWrite | kFast,                       0, 0, 0, SwapDb,    "server", "Not offered: databases are separate keyspaces.", "4.0.0"},
  {"counter.define", 2, kWrite | kAdmin | kNoMulti | kMovableKeys,      0, 0, 0, CounterDefine, "derived", "Runs a script of CREATE SOURCE, CREATE COUNTER, DROP and SHOW statements (tally).", "tally 0.2"},
  {"counter.drop",   2, kWrite | kAdmin | kNoMulti | kMovableKeys,      0, 0, 0, CounterDrop,   "derived", "Drops a derived counter and every group of it (tally).", "tally 0.2"},
  {"counter.list",   1, kReadOnly | kNoMulti,            0, 0, 0, CounterList,   "derived", "Lists the derived counters (tally).", "tally 0.2"},
  {"counter.push",  -2, kWrite | kNoMulti | kMovableKeys,               0, 0, 0, CounterPush,   "derived", "Applies changes (JSON) to every derived counter of their source, atomically (tally).", "tally 0.2"},
  {"counter.backfill", -3, kWrite | kNoMulti | kMovableKeys,           0, 0, 0, CounterBackfill, "derived", "Applies changes (JSON) to one derived counter only: gives a new counter the existing rows (tally).", "tally 0.2"},
  {"counter.hold",  -1, kAdmin | kNoMulti,               0, 0, 0, CounterHold,   "derived", "Holds source streams at a position for verification, or reports the hold (tally).", "tally 0.3"},
  {"counter.release", 1, kAdmin | kNoMulti,              0, 0, 0, CounterRelease, "derived", "Releases a verification hold (tally).", "tally 0.3"},
  {"counter.repair", -4, kWrite | kAdmin | kNoMulti | kMovableKeys,     0, 0, 0, CounterRepair, "derived", "Sets groups of a derived counter to given values in one commit: tally verify --repair (tally).", "tally 0.3"},
  {"counter.repairstate", -5, kWrite | kAdmin | kNoMulti | kMovableKeys, 0, 0, 0, CounterRepairState, "derived", "Sets whole groups of a derived counter that keeps hidden records (count(DISTINCT), min, max, avg, several aggregates) in one commit: tally verify --repair (tally).", "tally 0.4"},
  {"counter.get",   -2, kReadOnly | kNoMulti | kMovableKeys,            0, 0, 0, CounterGet,    "derived", "Returns one group of a derived counter by its key parts (tally).", "tally 0.2"},
  {"counter.scan",  -4, kReadOnly | kNoMulti | kMovableKeys,            0, 0, 0, CounterScan,   "derived", "Lists the groups of a derived counter under a key prefix, a page at a time (tally).", "tally 0.2"},
  {"counter.top",   -3, kReadOnly | kNoMulti | kMovableKeys,            0, 0, 0, CounterTop,    "derived", "Returns the k largest groups of a derived counter under a key prefix (tally).", "tally 0.2"},
  {"counter.range", -4, kReadOnly | kNoMulti | kMovableKeys,           0, 0, 0, CounterRange,  "derived", "The time buckets of one group of a derived counter from one instant to another, taken together (tally).", "tally 0.4"},
  {"expire",     -3, kWrite | kFast,                       1, 1, 1, Expire,    "keyspace", "Sets a counter's time to live in seconds.", "1.0.0"},
  {"pexpire",    -3, kWrite | kFast,                       1, 1, 1, PExpire,   "keyspace", "Sets a counter's time to live in milliseconds.", "2.6.0"},
  {"expireat",   -3, kWrite | kFast,                       1, 1, 1, ExpireAt,  "keyspace", "Sets a counter's expiry to a Unix time in seconds.", "1.2.0"},
  {"pexpireat",  -3, kWrite | kFast,                       1, 1, 1, PExpireAt, "keyspace", "Sets a counter's expiry to a Unix time in milliseconds.", "2.6.0"},
  {"ttl",         2, kReadOnly | kFast,                    1, 1, 1, Ttl,       "keyspace", "Returns a counter's time to live in seconds.", "1.0.0"},
  {"pttl",        2, kReadOnly | kFast,                    1, 1, 1, PTtl,      "keyspace", "Returns a counter's time to live in milliseconds.", "2.6.0"},
  {"expiretime",  2, kReadOnly | kFast,                    1, 1, 1, ExpireTime, "keyspace", "Returns a counter's expiry as a Unix time in seconds.", "7.0.0"},
  {"pexpiretime", 2, kReadOnly | kFast,                    1, 1, 1, PExpireTime, "keyspace", "Returns a counter's expiry as a Unix time in milliseconds.", "7.0.0"},
  {"persist",     2, kWrite | kFast,                       1, 1, 1, Persist,   "keyspace", "Removes a counter's expiry.", "2.2.0"},
  {"multi",       1, kNoMulti | kFast,                     0, 0, 0, Multi,     "transactions", "Starts a transaction.", "1.2.0"},
  {"exec",        1, kNoMulti,                             0, 0, 0, Exec,      "transactions", "Applies the queued commands together, in one durable batch.", "1.2.0"},
  {"discard",     1, kNoMulti | kFast,                     0, 0, 0, Discard,   "transactions", "Drops the queued commands.", "2.0.0"},
  {"unwatch",     1, kFast,                                0, 0, 0, Unwatch,   "transactions", "Forgets watched keys (tally keeps none: WATCH is not offered).", "2.2.0"},
  {"ping",       -1, kFast | kLoading | kPubSub,           0, 0, 0, Ping,      "connection", "Returns PONG, or the argument.", "1.0.0"},
  {"echo",        2, kFast,                                0, 0, 0, Echo,      "connection", "Returns the argument.", "1.0.0"},
  {"quit",       -1, kNoAuth | kFast | kLoading | kPubSub, 0, 0, 0, Quit,      "connection", "Closes the connection.", "1.0.0"},
  {"select",      2, kFast | kLoading,                     0, 0, 0, Select,    "connection", "Selects the database (0 to --databases - 1) the connection's keys belong to.", "1.0.0"},
  {"hello",      -1, kNoAuth | kFast | kNoMulti | kLoading, 0, 0, 0, Hello,    "connection", "Handshakes: protocol version, authentication, client name.", "6.0.0"},
  {"auth",       -2, kNoAuth | kFast | kNoMulti | kLoading, 0, 0, 0, Auth,     "connection", "Authenticates the connection.", "1.0.0"},
  {"client",     -2, kLoading,                             0, 0, 0, Client,    "connection", "Connection commands: SETNAME GETNAME ID INFO LIST.", "2.4.0"},
  {"reset",       1, kNoAuth | kFast | kNoMulti | kLoading | kPubSub, 0, 0, 0, Reset, "connection", "Resets the connection's state.", "6.2.0"},
  {"subscribe",  -2, kNoMulti | kPubSub,                   0, 0, 0, Subscribe,   "pubsub", "Follows counters: their current values, then every new value (coalesced; tally).", "2.0.0"},
  {"psubscribe", -2, kNoMulti | kPubSub,                   0, 0, 0, PSubscribe,  "pubsub", "Follows every counter under a key prefix: patterns of the form prefix* (tally).", "2.0.0"},
  {"unsubscribe", -1, kNoMulti | kPubSub,                  0, 0, 0, Unsubscribe, "pubsub", "Stops following counters (all without arguments).", "2.0.0"},
  {"punsubscribe", -1, kNoMulti | kPubSub,                 0, 0, 0, PUnsubscribe, "pubsub", "Stops following key prefixes (all without arguments).", "2.0.0"},
  {"command",    -1, kLoading,                             0, 0, 0, Command,   "server", "Describes the commands: COUNT, DOCS, INFO, LIST.", "2.8.13"},
  {"info",       -1, kLoading,                             0, 0, 0, Info,      "server", "Returns figures about the server.", "1.0.0"},
  {"config",     -2, kAdmin | kLoading,                    0, 0, 0, Config,    "server", "CONFIG GET: reads settings.", "2.0.0"},
  {"acl",        -2, kAdmin | kNoMulti | kLoading,         0, 0, 0, AclCommand, "server", "Users and permissions: SETUSER GETUSER DELUSER LIST USERS WHOAMI CAT LOG SAVE LOAD.", "6.0.0"},
  {"time",        1, kFast | kLoading,                     0, 0, 0, Time,      "server", "Returns the server's time.", "2.6.0"},
  {"cluster",    -2, kLoading,                             0, 0, 0, Cluster,   "cluster", "The cluster's layout: SLOTS SHARDS NODES INFO KEYSLOT MYID.", "3.0.0"},
  {"cluster.drain", -1, kAdmin | kNoMulti | kLoading,      0, 0, 0, ClusterDrain, "cluster", "Hands every partition of this node over to the others, one at a time, and claims none; CANCEL ends it (tally).", "tally 0.4"},
  {"readonly",    1, kFast | kLoading,                     0, 0, 0, ReadOnly,  "cluster", "Lets the connection read the slots this node follows as a standby (values may lag).", "3.0.0"},
  {"readwrite",   1, kFast | kLoading,                     0, 0, 0, ReadWrite, "cluster", "Ends READONLY.", "3.0.0"},
  {"asking",      1, kFast,                                0, 0, 0, Asking,    "cluster", "Accepted for cluster clients (tally never sends ASK).", "3.0.0"},
};
// clang-format on

const std::unordered_map<std::string_view, const CommandSpec*>& Index() {
  static const auto* index = [] {
    auto* map = new std::unordered_map<std::string_view, const CommandSpec*>();
    for (const CommandSpec& spec : kCommands) map->emplace(spec.name, &spec);
    return map;
  }();
  return *index;
}

}  // namespace

const CommandSpec* FindCommand(std::string_view name) {
  if (name.size() > 32) return nullptr;
  char lower[32];
  for (size_t i = 0; i < name.size(); ++i) lower[i] = AsciiLower(name[i]);
  const auto& index = Index();
  const auto it = index.find(std::string_view(lower, name.size()));
  return it == index.end() ? nullptr : it->second;
}

std::span<const CommandSpec> AllCommands() { return kCommands; }

void KeyPositions(const CommandSpec& spec, size_t argc, std::vector<size_t>* positions) {
  positions->clear();
  if (spec.first_key == 0) return;
  const auto last = spec.last_key < 0 ? static_cast<int>(argc) + spec.last_key : spec.last_key;
  for (int i = spec.first_key; i <= last && i < static_cast<int>(argc); i += spec.key_step) {
    positions->push_back(static_cast<size_t>(i));
  }
}

std::vector<std::string_view> FlagNames(const CommandSpec& spec) {
  std::vector<std::string_view> names;
  if (spec.flags & kWrite) names.emplace_back("write");
  if (spec.flags & kReadOnly) names.emplace_back("readonly");
  if (spec.flags & kWrite) names.emplace_back("denyoom");
  if (spec.flags & kAdmin) names.emplace_back("admin");
  if (spec.flags & kNoAuth) names.emplace_back("no_auth");
  if (spec.flags & kNoMulti) names.emplace_back("no_multi");
  if (spec.flags & kLoading) names.emplace_back("loading");
  if (spec.flags & kFast) names.emplace_back("fast");
  if (spec.flags & kMovableKeys) names.emplace_back("movablekeys");
  return names;
}

}  // namespace tally::redis
