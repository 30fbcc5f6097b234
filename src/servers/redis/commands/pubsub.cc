// Pub/sub commands: live values of counters, with Redis's own reply shapes, so that
// redis-cli SUBSCRIBE and every client's pub/sub API work unchanged.
//
// A channel is a counter's key; a message's payload is the counter's value in decimal.
// SUBSCRIBE key... follows counters exactly; PSUBSCRIBE takes only patterns of the form
// <literal prefix>* and follows every counter under the prefix ("pmessage"). Each followed
// counter sends its current value first, then its new values, coalesced to at most one per
// --subscription-interval-ms (see engine::SubscriptionHub). In RESP2 a subscribed
// connection takes only (P)SUBSCRIBE, (P)UNSUBSCRIBE, PING, QUIT and RESET, as in Redis; in
// RESP3 messages are push frames and every command keeps working.
//
// Databases: a subscription follows keys of the database selected when it was made, and
// keeps following them after a SELECT (RESP3). The session keeps channels and patterns in
// their stored form (engine/databases.h) and names them to the client without the prefix.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/integer.h"
#include "engine/databases.h"
#include "servers/redis/session.h"

namespace tally::redis {
namespace {

// The prefix of a PSUBSCRIBE pattern, or an error for a pattern that is not "<prefix>*".
Result<std::string> PrefixOfPattern(std::string_view pattern) {
  const std::string_view prefix = pattern.substr(0, pattern.empty() ? 0 : pattern.size() - 1);
  if (!pattern.ends_with('*') || prefix.find_first_of("*?[\\") != std::string_view::npos) {
    return InvalidArgument(fmt::format(
        "ERR tally supports only key-prefix patterns, <prefix>* (a literal prefix, then one "
        "'*'), got '{}'",
        pattern));
  }
  return std::string(prefix);
}

// ["subscribe", "likes:7", 1] and the like.
void Confirm(CommandContext& ctx, std::string_view kind, const std::string_view* name) {
  ctx.reply.PushHeader(3);
  ctx.reply.Bulk(kind);
  if (name != nullptr) {
    ctx.reply.Bulk(*name);
  } else {
    ctx.reply.Null();
  }
  ctx.reply.Integer(static_cast<int64_t>(ctx.session.subscription_count()));
}

// SUBSCRIBE / PSUBSCRIBE: keys or prefixes to follow, then one confirmation each.
void Follow(CommandContext& ctx, bool patterns) {
  const uint32_t db = ctx.session.db();
  std::vector<std::string> names;  // stored forms
  std::vector<std::string> prefixes;
  for (const std::string_view name : ctx.args.subspan(1)) {
    std::string_view key = name;
    if (patterns) {
      auto prefix = PrefixOfPattern(name);
      if (!prefix) {
        ctx.reply.Error(prefix.error().message);
        return;
      }
      key = name.substr(0, prefix->size());
    }
    if (db == 0 && engine::IsReservedKey(key)) {
      ctx.reply.Error(fmt::format("ERR {}", engine::kReservedKeyMessage));
      return;
    }
    names.push_back(engine::StoredKey(db, name));
    if (patterns) prefixes.push_back(engine::StoredKey(db, key));
  }
  engine::SubscriptionHub* hub = ctx.server.subscriptions();
  const engine::SubscriberId subscriber = ctx.session.EnsureSubscriber();
  if (hub == nullptr || subscriber == 0) {
    ctx.reply.Error("ERR live subscriptions are not enabled on this server");
    return;
  }
  const Status status =
      patterns ? hub->Subscribe(subscriber, {}, prefixes) : hub->Subscribe(subscriber, names, {});
  if (!status) {
    ctx.reply.Error("ERR " + status.error().message);
    // Past subscriber-max-subscriptions: refused whole, nothing more followed (a dropped
    // subscriber instead stays until the hub has told its connection, which closes).
    if (status.error().code == ErrorCode::kInvalidArgument &&
        ctx.session.subscription_count() == 0) {
      ctx.session.EndSubscriptions();
    }
    return;
  }
  std::set<std::string>& followed =
      patterns ? ctx.session.pubsub().patterns : ctx.session.pubsub().channels;
  for (size_t i = 0; i < names.size(); ++i) {
    followed.insert(names[i]);
    const std::string_view name = ctx.args[i + 1];
    Confirm(ctx, patterns ? "psubscribe" : "subscribe", &name);
  }
}

// UNSUBSCRIBE / PUNSUBSCRIBE: the given names, or all; one confirmation each (one with a
// null name when nothing was followed).
void Unfollow(CommandContext& ctx, bool patterns) {
  std::set<std::string>& followed =
      patterns ? ctx.session.pubsub().patterns : ctx.session.pubsub().channels;
  // The names as the client spells them, and their stored forms (none for a key that
  // database 0 reserves: nothing can follow it).
  std::vector<std::string> names(ctx.args.begin() + 1, ctx.args.end());
  std::vector<std::optional<std::string>> stored;
  for (const std::string_view name : names) {
    if (ctx.session.db() == 0 && engine::IsReservedKey(name)) {
      stored.emplace_back();
    } else {
      stored.emplace_back(engine::StoredKey(ctx.session.db(), name));
    }
  }
  if (names.empty()) {
    for (const std::string& name : followed) {
      stored.emplace_back(name);
      names.emplace_back(engine::SplitStoredKey(name).name);
    }
  }
  // One confirmation a name, each with what is still followed after it (Redis's counts).
  const std::string_view kind = patterns ? "punsubscribe" : "unsubscribe";
  if (names.empty()) Confirm(ctx, kind, nullptr);
  std::vector<std::string> stopped;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::optional<std::string>& name = stored[i];
    if (name && followed.erase(*name) != 0) {
      stopped.push_back(patterns ? name->substr(0, name->size() - 1) : *name);
    }
    const std::string_view view = names[i];
    Confirm(ctx, kind, &view);
  }
  engine::SubscriptionHub* hub = ctx.server.subscriptions();
  const engine::SubscriberId subscriber = ctx.session.pubsub().subscriber;
  if (hub != nullptr && subscriber != 0 && !stopped.empty()) {
    if (patterns) {
      hub->Unsubscribe(subscriber, {}, stopped);
    } else {
      hub->Unsubscribe(subscriber, stopped, {});
    }
  }
  // Following nothing: the hub forgets the subscriber until the next SUBSCRIBE.
  if (ctx.session.subscription_count() == 0) ctx.session.EndSubscriptions();
}

}  // namespace

engine::SubscriberId Session::EnsureSubscriber() {
  engine::SubscriptionHub* hub = core_.subscriptions();
  if (pubsub_.subscriber == 0 && hub != nullptr && sink_factory_) {
    pubsub_.subscriber = hub->AddSubscriber(sink_factory_());
  }
  return pubsub_.subscriber;
}

void Session::EndSubscriptions() {
  if (pubsub_.subscriber != 0) core_.subscriptions()->RemoveSubscriber(pubsub_.subscriber);
  pubsub_ = PubSubState{};
}

// A new value goes to every channel and pattern that follows its key; a current value sent
// again (update.only_for) only to the subscriptions that asked for it, so that a PSUBSCRIBE
// does not repeat a `message` of a key the connection follows exactly, nor the reverse.
void Session::PushUpdates(const engine::SubscriptionDelivery& delivery) {
  char digits[24];
  for (const engine::SubscriptionUpdate& update : delivery.updates()) {
    const engine::DatabaseKey key = engine::SplitStoredKey(update.key);
    if (!MayRead(key.name)) continue;  // the user's key patterns (ACL), on the key's name
    const std::string_view value =
        update.shown ? std::string_view(update.shown->text)
                     : std::string_view(digits, FormatInt64(update.value, digits));
    const std::optional<engine::AskedBy>& only_for = update.only_for;
    if (pubsub_.channels.contains(update.key) && (!only_for || only_for->key)) {
      writer_.PushHeader(3);
      writer_.Bulk("message");
      writer_.Bulk(key.name);
      writer_.Bulk(value);
    }
    for (const std::string& pattern : pubsub_.patterns) {
      const std::string_view prefix = std::string_view(pattern).substr(0, pattern.size() - 1);
      if (!engine::PrefixFollows(prefix, update.key)) continue;
      if (only_for && std::ranges::find(only_for->prefixes, prefix) == only_for->prefixes.end()) {
        continue;
      }
      writer_.PushHeader(4);
      writer_.Bulk("pmessage");
      writer_.Bulk(engine::SplitStoredKey(pattern).name);
      writer_.Bulk(key.name);
      writer_.Bulk(value);
    }
  }
}

namespace commands {

void Subscribe(CommandContext& ctx) { Follow(ctx, /*patterns=*/false); }
void PSubscribe(CommandContext& ctx) { Follow(ctx, /*patterns=*/true); }
void Unsubscribe(CommandContext& ctx) { Unfollow(ctx, /*patterns=*/false); }
void PUnsubscribe(CommandContext& ctx) { Unfollow(ctx, /*patterns=*/true); }

}  // namespace commands

}  // namespace tally::redis
