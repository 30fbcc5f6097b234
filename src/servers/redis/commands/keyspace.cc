// Keyspace commands: existence, deletion, iteration and expiry of counters.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/glob.h"
#include "core/slot.h"
#include "engine/databases.h"
#include "engine/derived/derived_keyspace.h"
#include "servers/redis/cluster_redirect.h"
#include "servers/redis/command_args.h"
#include "servers/redis/session.h"

namespace tally::redis::commands {
namespace {

// EXPIRE key amount [NX | XX | GT | LT], in the unit and form the command names.
void ExpireGeneric(CommandContext& ctx, ExpiryUnit unit, bool absolute) {
  engine::ExpireCondition condition = engine::ExpireCondition::kAlways;
  bool nx = false;
  bool xx = false;
  bool gt = false;
  bool lt = false;
  for (size_t i = 3; i < ctx.args.size(); ++i) {
    const std::string_view option = ctx.args[i];
    if (EqualsIgnoreCase(option, "NX")) {
      nx = true;
    } else if (EqualsIgnoreCase(option, "XX")) {
      xx = true;
    } else if (EqualsIgnoreCase(option, "GT")) {
      gt = true;
    } else if (EqualsIgnoreCase(option, "LT")) {
      lt = true;
    } else {
      ctx.reply.Error(fmt::format("ERR Unsupported option {}", option));
      return;
    }
  }
  if (nx && (xx || gt || lt)) {
    ctx.reply.Error("ERR NX and XX, GT or LT options at the same time are not compatible");
    return;
  }
  if (gt && lt) {
    ctx.reply.Error("ERR GT and LT options at the same time are not compatible");
    return;
  }
  if (nx) condition = engine::ExpireCondition::kIfNoExpiry;
  if (xx) condition = engine::ExpireCondition::kIfHasExpiry;
  if (gt) condition = engine::ExpireCondition::kIfGreater;
  if (lt) condition = engine::ExpireCondition::kIfLess;
  // Options first, then the amount: the order in which Redis reports what is wrong.
  const auto amount = IntegerArgument(ctx, ctx.args[2]);
  if (!amount) return;
  // XX with GT or LT: both must hold; GT already requires an expiry, LT gets it checked here.
  if (xx && lt && ctx.view->DeadlineMillis(ctx.keys[0]) == -1) {
    ctx.reply.Integer(0);
    return;
  }
  const auto deadline = Deadline(ctx, *amount, unit, absolute, /*require_positive=*/false);
  if (!deadline) return;
  ctx.reply.Integer(ctx.view->Expire(ctx.keys[0], *deadline, condition) ? 1 : 0);
}

// One SCAN step over the selected database: appends the names (not the stored keys) of
// its counters that `wanted` accepts, tally's own records left out. Returns the next cursor.
uint64_t ScanDatabase(CommandContext& ctx, uint64_t cursor, size_t count,
                      const std::function<bool(std::string_view name)>& wanted,
                      std::vector<std::string>* names) {
  const uint32_t db = ctx.session.db();
  // A cluster node lists the keys of the slots it serves, as a Redis Cluster node does (it
  // holds the others as a standby).
  const cluster::Routing* cluster = ctx.server.cluster();
  const auto match = [&](std::string_view stored) {
    const engine::DatabaseKey key = engine::SplitStoredKey(stored);
    return key.db == db && !derived::IsInternalKey(stored) && wanted(key.name) &&
           (cluster == nullptr || ServesSlot(*cluster, KeySlot(stored)));
  };
  const size_t first = names->size();
  // Inside EXEC every stripe is already held by this thread: scan without locking.
  const uint64_t next = ctx.server.engine().keyspace().Scan(cursor, count, match, names,
                                                            /*stripes_held=*/ctx.view != nullptr);
  if (db != 0) {
    for (size_t i = first; i < names->size(); ++i) {
      (*names)[i].erase(0, engine::kDatabaseKeyPrefixSize);
    }
  }
  return next;
}

}  // namespace

void Del(CommandContext& ctx) {
  int64_t removed = 0;
  for (const engine::HashedKey& key : ctx.keys) removed += ctx.view->Delete(key) ? 1 : 0;
  ctx.reply.Integer(removed);
}

void Exists(CommandContext& ctx) {
  int64_t found = 0;
  for (const engine::HashedKey& key : ctx.keys) found += ctx.view->Exists(key) ? 1 : 0;
  ctx.reply.Integer(found);
}

void Type(CommandContext& ctx) {
  ctx.reply.SimpleString(ctx.view->Exists(ctx.keys[0]) ? "string" : "none");
}

void Scan(CommandContext& ctx) {
  const std::string_view cursor_text = ctx.args[1];
  uint64_t cursor = 0;
  for (const char c : cursor_text) {
    if (c < '0' || c > '9' || __builtin_mul_overflow(cursor, 10, &cursor) ||
        __builtin_add_overflow(cursor, static_cast<uint64_t>(c - '0'), &cursor)) {
      ctx.reply.Error("ERR invalid cursor");
      return;
    }
  }
  if (cursor_text.empty()) {
    ctx.reply.Error("ERR invalid cursor");
    return;
  }
  std::string_view pattern;
  bool only_counters = true;
  int64_t count = 10;
  for (size_t i = 2; i < ctx.args.size(); i += 2) {
    if (i + 1 >= ctx.args.size()) {
      ctx.reply.Error(kSyntaxError);
      return;
    }
    const std::string_view option = ctx.args[i];
    if (EqualsIgnoreCase(option, "MATCH")) {
      pattern = ctx.args[i + 1];
    } else if (EqualsIgnoreCase(option, "COUNT")) {
      const auto parsed = IntegerArgument(ctx, ctx.args[i + 1]);
      if (!parsed) return;
      if (*parsed < 1) {
        ctx.reply.Error(kSyntaxError);
        return;
      }
      count = *parsed;
    } else if (EqualsIgnoreCase(option, "TYPE")) {
      only_counters = EqualsIgnoreCase(ctx.args[i + 1], "string");
    } else {
      ctx.reply.Error(kSyntaxError);
      return;
    }
  }
  std::vector<std::string> keys;
  const auto wanted = [&](std::string_view name) {
    return only_counters && (pattern.empty() || pattern == "*" || GlobMatch(pattern, name));
  };
  const uint64_t next = ScanDatabase(ctx, cursor, static_cast<size_t>(count), wanted, &keys);
  ctx.reply.ArrayHeader(2);
  ctx.reply.BulkInteger(static_cast<int64_t>(next));
  ctx.reply.ArrayHeader(keys.size());
  for (const std::string& key : keys) ctx.reply.Bulk(key);
}

void Keys(CommandContext& ctx) {
  const std::string_view pattern = ctx.args[1];
  std::vector<std::string> keys;
  uint64_t cursor = 0;
  const auto wanted = [&](std::string_view name) {
    return pattern == "*" || GlobMatch(pattern, name);
  };
  do {
    cursor = ScanDatabase(ctx, cursor, 4096, wanted, &keys);
  } while (cursor != 0);
  ctx.reply.ArrayHeader(keys.size());
  for (const std::string& key : keys) ctx.reply.Bulk(key);
}

void DbSize(CommandContext& ctx) {
  if (ctx.server.cluster() == nullptr) {
    ctx.reply.Integer(
        static_cast<int64_t>(ctx.server.engine().keyspace().database_size(ctx.session.db())));
    return;
  }
  // A cluster node counts the keys of the slots it serves: a walk over the keyspace (the
  // keyspace keeps counts per database, not per slot).
  std::vector<std::string> names;
  int64_t count = 0;
  uint64_t cursor = 0;
  do {
    names.clear();
    cursor = ScanDatabase(
        ctx, cursor, 4096, [](std::string_view) { return true; }, &names);
    count += static_cast<int64_t>(names.size());
  } while (cursor != 0);
  ctx.reply.Integer(count);
}

namespace {
// FLUSHALL / FLUSHDB [SYNC | ASYNC]: both flush at once; false after replying otherwise.
bool FlushArguments(CommandContext& ctx) {
  if (ctx.args.size() > 2 || (ctx.args.size() == 2 && !EqualsIgnoreCase(ctx.args[1], "SYNC") &&
                              !EqualsIgnoreCase(ctx.args[1], "ASYNC"))) {
    ctx.reply.Error(kSyntaxError);
    return false;
  }
  return true;
}

// A cluster node flushes the partitions it owns (the others' owners flush theirs), one
// deletion per key, so that the standbys apply the same. The change feed's position record
// of each stays (routing.h: the pushes applied before are not applied again, here or by a
// later owner); the derived counters' indexes forget the groups flushed.
void FlushOwnedPartitions(CommandContext& ctx, const cluster::Routing& routing) {
  std::vector<SlotRange> flushed;
  for (uint32_t p = 0; p < routing.partition_count(); ++p) {
    if (routing.route(p) != cluster::Route::kServe) continue;
    const std::string position =
        derived::PositionKey(cluster::ChangePositionName(p, routing.partition_count()));
    const engine::HashedKey position_key(position);
    const std::optional<int64_t> applied = ctx.view->Get(position_key);
    flushed.push_back(PartitionSlots(p, routing.partition_count()));
    ctx.view->ClearSlots(flushed.back());
    if (applied) ctx.view->Set(position_key, *applied, engine::SetOptions{});
  }
  if (derived::DerivedCounters* derived = ctx.server.derived(); derived && !flushed.empty()) {
    derived->ForgetKeys([&flushed](std::string_view key) {
      const uint32_t slot = KeySlot(key);
      return std::any_of(flushed.begin(), flushed.end(),
                         [slot](SlotRange slots) { return slots.Contains(slot); });
    });
  }
}
}  // namespace

void FlushAll(CommandContext& ctx) {
  if (!FlushArguments(ctx)) return;
  if (const cluster::Routing* cluster = ctx.server.cluster()) {
    FlushOwnedPartitions(ctx, *cluster);
    ctx.reply.SimpleString("OK");
    return;
  }
  ctx.view->FlushAll();
  if (derived::DerivedCounters* derived = ctx.server.derived()) derived->OnFlushAll();
  ctx.reply.SimpleString("OK");
}

// Database 0 holds the derived counters' groups: flushing it empties them, as FLUSHALL does.
void FlushDb(CommandContext& ctx) {
  if (!FlushArguments(ctx)) return;
  if (const cluster::Routing* cluster = ctx.server.cluster()) {
    FlushOwnedPartitions(ctx, *cluster);  // a cluster has database 0 only
    ctx.reply.SimpleString("OK");
    return;
  }
  const uint32_t db = ctx.session.db();
  ctx.view->FlushDatabase(db);
  if (derived::DerivedCounters* derived = ctx.server.derived(); derived != nullptr && db == 0) {
    derived->OnFlushAll();
  }
  ctx.reply.SimpleString("OK");
}

void Move(CommandContext& ctx) {
  ctx.reply.Error(
      "ERR MOVE is not supported by tally: databases are separate keyspaces; read the value, "
      "write it in the other database, then DEL it (in MULTI/EXEC with SELECT, atomically)");
}

void SwapDb(CommandContext& ctx) {
  ctx.reply.Error("ERR SWAPDB is not supported by tally: databases are separate keyspaces");
}

void Expire(CommandContext& ctx) { ExpireGeneric(ctx, ExpiryUnit::kSeconds, false); }
void PExpire(CommandContext& ctx) { ExpireGeneric(ctx, ExpiryUnit::kMilliseconds, false); }
void ExpireAt(CommandContext& ctx) { ExpireGeneric(ctx, ExpiryUnit::kSeconds, true); }
void PExpireAt(CommandContext& ctx) { ExpireGeneric(ctx, ExpiryUnit::kMilliseconds, true); }

void Ttl(CommandContext& ctx) {
  const int64_t millis = ctx.view->TimeToLiveMillis(ctx.keys[0]);
  ctx.reply.Integer(millis < 0 ? millis : (millis + 500) / 1000);
}

void PTtl(CommandContext& ctx) { ctx.reply.Integer(ctx.view->TimeToLiveMillis(ctx.keys[0])); }

void ExpireTime(CommandContext& ctx) {
  const int64_t deadline = ctx.view->DeadlineMillis(ctx.keys[0]);
  ctx.reply.Integer(deadline < 0 ? deadline : deadline / 1000);
}

void PExpireTime(CommandContext& ctx) { ctx.reply.Integer(ctx.view->DeadlineMillis(ctx.keys[0])); }

void Persist(CommandContext& ctx) { ctx.reply.Integer(ctx.view->Persist(ctx.keys[0]) ? 1 : 0); }

}  // namespace tally::redis::commands
