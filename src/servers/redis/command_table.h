// The declarative table of Redis commands tally serves. Existence, arity, authentication
// and MULTI queueing are checked once, centrally, by the dispatcher (Session::Execute)
// before any handler runs; handlers stay thin.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/keyspace.h"
#include "servers/redis/resp_writer.h"

namespace tally::redis {

class Session;
class ServerCore;

// Command flags. Their names (for COMMAND INFO) follow Redis.
enum CommandFlag : uint32_t {
  kWrite = 1 << 0,       // changes counters
  kReadOnly = 1 << 1,    // reads counters
  kFast = 1 << 2,        // O(1) or O(log N)
  kNoAuth = 1 << 3,      // allowed before AUTH
  kNoMulti = 1 << 4,     // refused inside MULTI (HELLO, AUTH)
  kAllStripes = 1 << 5,  // locks the whole keyspace (FLUSHALL)
  kIncrement = 1 << 6,   // a plain increment: coalesced in the worker's IncrementBuffer
  kAdmin = 1 << 7,
  kLoading = 1 << 8,  // allowed while loading
  kPubSub = 1 << 9,   // allowed in RESP2's subscribed mode (not listed by COMMAND INFO)
  // Its keys are not at fixed positions (a derived counter's group key is built from its
  // arguments): COMMAND GETKEYS names the argument a cluster client routes it by (the
  // counter, or a push's body). Any node of a cluster serves these, so it only spreads them.
  kMovableKeys = 1 << 10,
};

// What a handler gets: the request, its keys already hashed and locked, and where to reply.
struct CommandContext {
  std::span<const std::string_view> args;   // args[0] is the command name as sent
  std::span<const engine::HashedKey> keys;  // the key arguments, in order
  ReplyWriter& reply;
  Session& session;
  ServerCore& server;
  engine::View* view;  // holds the stripes of `keys` (all stripes inside EXEC); null if keyless
};

using CommandHandler = void (*)(CommandContext&);

struct CommandSpec {
  std::string_view name;  // lower case
  int arity;              // N: exactly N arguments with the name; -N: at least N
  uint32_t flags;
  int first_key;  // position of the first key argument; 0 = no keys
  int last_key;   // position of the last key; -1 = the last argument
  int key_step;
  CommandHandler handler;
  std::string_view group;
  std::string_view summary;
  std::string_view since;
};

// The spec for a command name in any case, or null.
const CommandSpec* FindCommand(std::string_view name);

// ASCII case folding, as Redis folds command names and keywords (no locale).
inline char AsciiLower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c;
}

std::span<const CommandSpec> AllCommands();

// Positions of the key arguments of a request (empty when the command has none).
void KeyPositions(const CommandSpec& spec, size_t argc, std::vector<size_t>* positions);

// The flag names of a spec, as COMMAND INFO lists them.
std::vector<std::string_view> FlagNames(const CommandSpec& spec);

// Handlers, by file. Each is registered in command_table.cc.
namespace commands {
// counters.cc
void Incr(CommandContext& ctx);
void Decr(CommandContext& ctx);
void IncrBy(CommandContext& ctx);
void DecrBy(CommandContext& ctx);
void IncrByEx(CommandContext& ctx);
void Get(CommandContext& ctx);
void MGet(CommandContext& ctx);
void Set(CommandContext& ctx);
void SetNx(CommandContext& ctx);
void SetEx(CommandContext& ctx);
void PSetEx(CommandContext& ctx);
void MSet(CommandContext& ctx);
void MSetNx(CommandContext& ctx);
void GetSet(CommandContext& ctx);
void GetDel(CommandContext& ctx);
void GetEx(CommandContext& ctx);
// keyspace.cc
void Del(CommandContext& ctx);
void Exists(CommandContext& ctx);
void Type(CommandContext& ctx);
void Scan(CommandContext& ctx);
void Keys(CommandContext& ctx);
void DbSize(CommandContext& ctx);
void FlushAll(CommandContext& ctx);
void FlushDb(CommandContext& ctx);
void Move(CommandContext& ctx);
void SwapDb(CommandContext& ctx);
void Expire(CommandContext& ctx);
void PExpire(CommandContext& ctx);
void ExpireAt(CommandContext& ctx);
void PExpireAt(CommandContext& ctx);
void Ttl(CommandContext& ctx);
void PTtl(CommandContext& ctx);
void ExpireTime(CommandContext& ctx);
void PExpireTime(CommandContext& ctx);
void Persist(CommandContext& ctx);
// derived.cc
void CounterDefine(CommandContext& ctx);
void CounterDrop(CommandContext& ctx);
void CounterList(CommandContext& ctx);
void CounterPush(CommandContext& ctx);
void CounterBackfill(CommandContext& ctx);
void CounterGet(CommandContext& ctx);
void CounterScan(CommandContext& ctx);
void CounterTop(CommandContext& ctx);
void CounterRange(CommandContext& ctx);
void CounterHold(CommandContext& ctx);
void CounterRelease(CommandContext& ctx);
void CounterRepair(CommandContext& ctx);
void CounterRepairState(CommandContext& ctx);
// connection.cc
void Ping(CommandContext& ctx);
void Echo(CommandContext& ctx);
void Quit(CommandContext& ctx);
void Select(CommandContext& ctx);
// The database a SELECT argument names, or nullopt when it is no integer in [0, databases).
std::optional<uint32_t> DatabaseIndex(std::string_view text, uint32_t databases);
void Hello(CommandContext& ctx);
void Auth(CommandContext& ctx);
void Client(CommandContext& ctx);
void Reset(CommandContext& ctx);
// pubsub.cc
void Subscribe(CommandContext& ctx);
void PSubscribe(CommandContext& ctx);
void Unsubscribe(CommandContext& ctx);
void PUnsubscribe(CommandContext& ctx);
// server.cc
void Command(CommandContext& ctx);
void Info(CommandContext& ctx);
void Config(CommandContext& ctx);
void Time(CommandContext& ctx);
// acl.cc
void AclCommand(CommandContext& ctx);
// cluster.cc
void Cluster(CommandContext& ctx);
void ClusterDrain(CommandContext& ctx);
void ReadOnly(CommandContext& ctx);
void ReadWrite(CommandContext& ctx);
void Asking(CommandContext& ctx);
// INFO's "# Cluster" section (cluster_enabled, and in a cluster its nodes and partitions).
void ClusterSection(CommandContext& ctx, std::string& out);
// transactions (MULTI, EXEC, DISCARD) are the dispatcher's own: see Session.
void Multi(CommandContext& ctx);
void Exec(CommandContext& ctx);
void Discard(CommandContext& ctx);
void Unwatch(CommandContext& ctx);
}  // namespace commands

}  // namespace tally::redis
