// Connection commands: handshake, authentication, client naming and introspection.
#include <fmt/format.h>

#include <algorithm>

#include "core/integer.h"
#include "servers/redis/command_args.h"
#include "servers/redis/session.h"

namespace tally::redis::commands {
namespace {

constexpr std::string_view kWrongPass =
    "WRONGPASS invalid username-password pair or user is disabled.";

// Checks a user's password against the ACL and, when right, makes the session that user.
// Failures are logged (ACL LOG) and counted against the client's address: past
// --max-auth-failures a minute, AUTH from it is refused unchecked for the rest of the minute.
// Replies the error itself when false.
bool Authenticate(CommandContext& ctx, std::string_view user, std::string_view password) {
  auth::Acl& acl = ctx.server.acl();
  const std::string& address = ctx.session.info().address;
  const std::string ip = address.substr(0, address.rfind(':'));
  const int64_t now = ctx.server.engine().keyspace().clock()->NowMillis();
  if (acl.AuthBlocked(ip, now)) {
    ctx.session.LogAcl("auth", "AUTH", user);
    ctx.reply.Error(fmt::format("ERR {}", auth::kTooManyAuthFailures));
    return false;
  }
  auto found = acl.Authenticate(user, password);
  if (found == nullptr) {
    acl.AuthFailed(ip, now);
    ctx.session.LogAcl("auth", "AUTH", user);
    ctx.reply.Error(kWrongPass);
    return false;
  }
  ctx.session.set_user(std::move(found));
  return true;
}

// No spaces, newlines or special characters: printable ASCII only.
bool ValidClientName(std::string_view name) {
  return std::ranges::all_of(name, [](char c) { return c >= '!' && c <= '~'; });
}

std::string ClientLine(const ClientInfo& client, int64_t now_ms) {
  std::string name;
  {
    std::lock_guard lock(client.mutex);
    name = client.name;
  }
  const CommandSpec* last = client.last_command.load(std::memory_order_relaxed);
  const int64_t idle = (now_ms - client.last_interaction_ms.load(std::memory_order_relaxed)) / 1000;
  return fmt::format(
      "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub=0 psub=0 ssub=0 "
      "multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem={} "
      "tot-mem=0 events=r cmd={} user=default redir=-1 resp={}\n",
      client.id, client.address, client.local_address, client.fd, name,
      (now_ms - client.created_ms) / 1000, idle,
      client.in_multi.load(std::memory_order_relaxed) ? "x" : "N",
      client.db.load(std::memory_order_relaxed),
      client.in_multi.load(std::memory_order_relaxed) ? 0 : -1,
      client.query_buffer_bytes.load(std::memory_order_relaxed),
      client.output_buffer_bytes.load(std::memory_order_relaxed),
      last == nullptr ? std::string_view("NULL") : last->name,
      client.protocol.load(std::memory_order_relaxed));
}

bool SetName(CommandContext& ctx, std::string_view name) {
  if (!ValidClientName(name)) {
    ctx.reply.Error("ERR Client names cannot contain spaces, newlines or special characters.");
    return false;
  }
  std::lock_guard lock(ctx.session.info().mutex);
  ctx.session.info().name = std::string(name);
  return true;
}

}  // namespace

void Ping(CommandContext& ctx) {
  if (ctx.args.size() > 2) {
    ctx.reply.Error("ERR wrong number of arguments for 'ping' command");
  } else if (ctx.session.protocol() == 2 && ctx.session.subscription_count() > 0) {
    // As Redis in RESP2's subscribed mode: ["pong", argument or ""].
    ctx.reply.ArrayHeader(2);
    ctx.reply.Bulk("pong");
    ctx.reply.Bulk(ctx.args.size() == 2 ? ctx.args[1] : std::string_view());
  } else if (ctx.args.size() == 2) {
    ctx.reply.Bulk(ctx.args[1]);
  } else {
    ctx.reply.SimpleString("PONG");
  }
}

void Echo(CommandContext& ctx) { ctx.reply.Bulk(ctx.args[1]); }

void Quit(CommandContext& ctx) {
  ctx.reply.SimpleString("OK");
  ctx.session.RequestClose();
}

std::optional<uint32_t> DatabaseIndex(std::string_view text, uint32_t databases) {
  const std::optional<int64_t> index = ParseInt64(text);
  if (!index || *index < 0 || *index >= static_cast<int64_t>(databases)) return std::nullopt;
  return static_cast<uint32_t>(*index);
}

// Redis's replies: a non-integer first, then a number outside [0, --databases).
void Select(CommandContext& ctx) {
  if (!IntegerArgument(ctx, ctx.args[1])) return;
  const std::optional<uint32_t> db = DatabaseIndex(ctx.args[1], ctx.server.options().databases);
  if (!db) {
    ctx.reply.Error("ERR DB index is out of range");
    return;
  }
  ctx.session.set_db(*db);
  ctx.reply.SimpleString("OK");
}

// HELLO [protover [AUTH username password] [SETNAME clientname]]
void Hello(CommandContext& ctx) {
  int protocol = ctx.session.protocol();
  size_t i = 1;
  if (ctx.args.size() >= 2) {
    const auto version = ParseInt64(ctx.args[1]);
    if (!version) {
      ctx.reply.Error("ERR Protocol version is not an integer or out of range");
      return;
    }
    if (*version < 2 || *version > 3) {
      ctx.reply.Error("NOPROTO unsupported protocol version");
      return;
    }
    protocol = static_cast<int>(*version);
    i = 2;
  }
  std::string_view name;
  bool set_name = false;
  for (; i < ctx.args.size(); ++i) {
    const bool more = i + 1 < ctx.args.size();
    if (EqualsIgnoreCase(ctx.args[i], "AUTH") && i + 2 < ctx.args.size()) {
      if (!Authenticate(ctx, ctx.args[i + 1], ctx.args[i + 2])) return;
      i += 2;
    } else if (EqualsIgnoreCase(ctx.args[i], "SETNAME") && more) {
      name = ctx.args[++i];
      set_name = true;
    } else {
      ctx.reply.Error(fmt::format("ERR Syntax error in HELLO option '{}'", ctx.args[i]));
      return;
    }
  }
  if (!ctx.session.authenticated()) {
    ctx.reply.Error(
        "NOAUTH HELLO must be called with the client already authenticated, "
        "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
        "authenticate the client and select the RESP protocol version at the same "
        "time");
    return;
  }
  if (set_name && !SetName(ctx, name)) return;
  ctx.session.set_protocol(protocol);
  ctx.reply.MapHeader(7);
  ctx.reply.Bulk("server");
  ctx.reply.Bulk("tally");
  ctx.reply.Bulk("version");
  ctx.reply.Bulk("7.0.0");
  ctx.reply.Bulk("proto");
  ctx.reply.Integer(protocol);
  ctx.reply.Bulk("id");
  ctx.reply.Integer(static_cast<int64_t>(ctx.session.info().id));
  ctx.reply.Bulk("mode");
  ctx.reply.Bulk("standalone");
  ctx.reply.Bulk("role");
  ctx.reply.Bulk("master");
  ctx.reply.Bulk("modules");
  ctx.reply.ArrayHeader(0);
}

// AUTH [username] password
void Auth(CommandContext& ctx) {
  if (ctx.args.size() > 3) {
    ctx.reply.Error(kSyntaxError);
    return;
  }
  if (ctx.args.size() == 2 && ctx.server.acl().OpenDefault() != nullptr) {
    ctx.reply.Error(
        "ERR AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?");
    return;
  }
  const std::string_view user = ctx.args.size() == 3 ? ctx.args[1] : "default";
  if (Authenticate(ctx, user, ctx.args.back())) ctx.reply.SimpleString("OK");
}

void Client(CommandContext& ctx) {
  const std::string_view sub = ctx.args[1];
  const int64_t now = ctx.server.engine().keyspace().clock()->NowMillis();
  if (EqualsIgnoreCase(sub, "SETNAME") && ctx.args.size() == 3) {
    if (SetName(ctx, ctx.args[2])) ctx.reply.SimpleString("OK");
  } else if (EqualsIgnoreCase(sub, "GETNAME") && ctx.args.size() == 2) {
    std::lock_guard lock(ctx.session.info().mutex);
    if (ctx.session.info().name.empty()) {
      ctx.reply.Null();
    } else {
      ctx.reply.Bulk(ctx.session.info().name);
    }
  } else if (EqualsIgnoreCase(sub, "ID") && ctx.args.size() == 2) {
    ctx.reply.Integer(static_cast<int64_t>(ctx.session.info().id));
  } else if (EqualsIgnoreCase(sub, "INFO") && ctx.args.size() == 2) {
    ctx.reply.Verbatim(ClientLine(ctx.session.info(), now));
  } else if (EqualsIgnoreCase(sub, "LIST")) {
    std::string list;
    for (const auto& client : ctx.server.clients().Snapshot()) list += ClientLine(*client, now);
    ctx.reply.Verbatim(list);
  } else if ((EqualsIgnoreCase(sub, "SETINFO") && ctx.args.size() == 4) ||
             ((EqualsIgnoreCase(sub, "NO-EVICT") || EqualsIgnoreCase(sub, "NO-TOUCH")) &&
              ctx.args.size() == 3)) {
    ctx.reply.SimpleString("OK");  // accepted for clients that send them; nothing to change
  } else {
    ReplyUnknownSubcommand(ctx, "CLIENT");
  }
}

void Reset(CommandContext& ctx) {
  ctx.session.ClearMulti();
  ctx.session.EndSubscriptions();
  ctx.session.set_protocol(2);
  ctx.session.set_db(0);
  {
    std::lock_guard lock(ctx.session.info().mutex);
    ctx.session.info().name.clear();
  }
  ctx.session.set_user(ctx.server.acl().OpenDefault());
  ctx.reply.SimpleString("RESET");
}

}  // namespace tally::redis::commands
