// ACL SETUSER GETUSER DELUSER LIST USERS WHOAMI CAT DRYRUN GENPASS LOG SAVE LOAD, over the
// node's Acl
// (servers/auth/acl.h), and the categories of the command table.
#include <fmt/format.h>
#include <openssl/rand.h>

#include <algorithm>

#include "core/integer.h"
#include "servers/redis/acl_commands.h"
#include "servers/redis/command_args.h"
#include "servers/redis/session.h"

namespace tally::redis {
namespace {

// Commands that answer with a counter's value as well as change it: they read their key.
bool ReadsWhatItWrites(const CommandSpec& spec) {
  static constexpr std::string_view kNames[] = {"incr",     "decr",   "incrby", "decrby",
                                                "incrbyex", "getset", "getdel", "getex"};
  return std::ranges::find(kNames, spec.name) != std::end(kNames);
}

// ACL DRYRUN user command [arg ...]: whether `user` may run the command, nothing run; as
// Redis 7 answers it (+OK, or the refusal as a bulk string).
void DryRun(CommandContext& ctx) {
  const auto user = ctx.server.acl().Find(ctx.args[2]);
  if (user == nullptr) return ctx.reply.Error(fmt::format("ERR User '{}' not found", ctx.args[2]));
  const CommandSpec* spec = FindCommand(ctx.args[3]);
  if (spec == nullptr) {
    return ctx.reply.Error(fmt::format("ERR Command '{}' not found", ctx.args[3]));
  }
  const std::span<const std::string_view> args = ctx.args.subspan(3);
  const int argc = static_cast<int>(args.size());
  if ((spec->arity > 0 && argc != spec->arity) || (spec->arity < 0 && argc < -spec->arity)) {
    return ctx.reply.Error(
        fmt::format("ERR wrong number of arguments for '{}' command", spec->name));
  }
  std::vector<size_t> positions;
  KeyPositions(*spec, args.size(), &positions);
  const std::optional<Refusal> refusal = CheckPermission(*user, *spec, args, positions);
  if (!refusal) return ctx.reply.SimpleString("OK");
  if (refusal->reason == "command") {
    return ctx.reply.Bulk(fmt::format("User {} has no permissions to run the '{}' command",
                                      user->name(), spec->name));
  }
  ctx.reply.Bulk(fmt::format("User {} has no permissions to access the '{}' {}", user->name(),
                             refusal->object, spec->name == "subscribe" ? "channel" : "key"));
}

// ACL GENPASS [bits]: a random password of `bits` (256 by default) from OpenSSL's CSPRNG,
// in hexadecimal, as Redis spells it.
void GenPass(CommandContext& ctx) {
  int64_t bits = 256;
  if (ctx.args.size() == 3) {
    const std::optional<int64_t> asked = ParseInt64(ctx.args[2]);
    if (!asked || *asked < 1 || *asked > 4096) {
      return ctx.reply.Error(
          "ERR ACL GENPASS argument must be the number of bits for the output password, a "
          "positive number up to 4096");
    }
    bits = *asked;
  }
  const size_t digits = static_cast<size_t>((bits + 3) / 4);
  std::vector<unsigned char> random((digits + 1) / 2);
  if (RAND_bytes(random.data(), static_cast<int>(random.size())) != 1) {
    return ctx.reply.Error("ERR no random bytes for a password (OpenSSL's RAND_bytes failed)");
  }
  std::string password;
  for (const unsigned char byte : random) password += fmt::format("{:02x}", byte);
  password.resize(digits);
  ctx.reply.Bulk(password);
}

}  // namespace

uint32_t CategoriesOf(const CommandSpec& spec) {
  uint32_t categories = 0;
  if (spec.flags & kWrite) categories |= auth::kWrite;
  if (spec.flags & kReadOnly) categories |= auth::kRead;
  if (spec.flags & kAdmin) categories |= auth::kAdmin | auth::kDangerous;
  categories |= (spec.flags & kFast) ? auth::kFast : auth::kSlow;
  const std::string_view group = spec.group;
  if (group == "string") categories |= auth::kString;
  if (group == "keyspace") categories |= auth::kKeyspace;
  if (group == "pubsub") categories |= auth::kPubSub;
  if (group == "connection") categories |= auth::kConnection;
  if (group == "transactions") categories |= auth::kTransaction;
  if (spec.name == "flushall" || spec.name == "flushdb" || spec.name == "keys") {
    categories |= auth::kKeyspace | auth::kDangerous;
  }
  if (spec.name == "dbsize") categories |= auth::kKeyspace;
  if (spec.name == "counter.define" || spec.name == "counter.drop") {
    categories |= auth::kDefinitions;
  }
  if (spec.name == "counter.push" || spec.name == "counter.backfill") categories |= auth::kPush;
  if (spec.name == "info" || spec.name == "acl") categories |= auth::kDangerous;
  return categories;
}

std::vector<auth::CommandInfo> AclCommandInfo() {
  std::vector<auth::CommandInfo> commands;
  for (const CommandSpec& spec : AllCommands()) {
    commands.push_back({std::string(spec.name), CategoriesOf(spec)});
  }
  return commands;
}

std::optional<Refusal> CheckPermission(const auth::User& user, const CommandSpec& spec,
                                       std::span<const std::string_view> args,
                                       std::span<const size_t> key_positions) {
  const bool own_identity =
      spec.name == "acl" && args.size() >= 2 &&
      (EqualsIgnoreCase(args[1], "WHOAMI") || EqualsIgnoreCase(args[1], "CAT"));
  if (!own_identity && !user.CanRun(static_cast<size_t>(&spec - AllCommands().data()))) {
    return Refusal{"command", std::string(spec.name)};
  }
  uint8_t access = 0;
  if (spec.flags & kReadOnly) access |= auth::kReadKey;
  if (spec.flags & kWrite) access |= auth::kWriteKey;
  if (ReadsWhatItWrites(spec)) access |= auth::kReadKey;
  if (spec.name == "subscribe") {
    for (size_t i = 1; i < args.size(); ++i) {
      if (!user.CanAccess(args[i], auth::kReadKey)) return Refusal{"key", std::string(args[i])};
    }
    return std::nullopt;
  }
  if (access == 0 || spec.group == "derived") return std::nullopt;
  if (spec.first_key == 0) {
    if (!user.CanAccessAll(access)) return Refusal{"key", "*"};
    return std::nullopt;
  }
  for (const size_t position : key_positions) {
    if (!user.CanAccess(args[position], access)) {
      return Refusal{"key", std::string(args[position])};
    }
  }
  return std::nullopt;
}

namespace commands {
namespace {

void GetUser(CommandContext& ctx, const auth::User& user) {
  ctx.reply.MapHeader(5);
  ctx.reply.Bulk("flags");
  const auto flags = user.flags();
  ctx.reply.ArrayHeader(flags.size());
  for (const auto& flag : flags) ctx.reply.Bulk(flag);
  ctx.reply.Bulk("passwords");
  ctx.reply.ArrayHeader(user.password_hashes().size());
  for (const auto& hash : user.password_hashes()) ctx.reply.Bulk(hash);
  ctx.reply.Bulk("commands");
  ctx.reply.Bulk(user.CommandRules());
  ctx.reply.Bulk("keys");
  ctx.reply.Bulk(user.KeyRules());
  ctx.reply.Bulk("channels");
  ctx.reply.Bulk("");
}

void Log(CommandContext& ctx) {
  auth::Acl& acl = ctx.server.acl();
  size_t count = 10;
  if (ctx.args.size() == 3) {
    if (EqualsIgnoreCase(ctx.args[2], "RESET")) {
      acl.ResetLog();
      ctx.reply.SimpleString("OK");
      return;
    }
    const auto parsed = ParseInt64(ctx.args[2]);
    if (!parsed || *parsed < 0) {
      ctx.reply.Error("ERR value is out of range, must be positive");
      return;
    }
    count = static_cast<size_t>(*parsed);
  } else if (ctx.args.size() > 3) {
    ctx.reply.Error(kSyntaxError);
    return;
  }
  const int64_t now = ctx.server.engine().keyspace().clock()->NowMillis();
  const auto entries = acl.LogEntries(count);
  ctx.reply.ArrayHeader(entries.size());
  for (const auth::AclLogEntry& entry : entries) {
    ctx.reply.MapHeader(10);
    ctx.reply.Bulk("count");
    ctx.reply.Integer(entry.count);
    ctx.reply.Bulk("reason");
    ctx.reply.Bulk(entry.reason);
    ctx.reply.Bulk("context");
    ctx.reply.Bulk(entry.context);
    ctx.reply.Bulk("object");
    ctx.reply.Bulk(entry.object);
    ctx.reply.Bulk("username");
    ctx.reply.Bulk(entry.username);
    ctx.reply.Bulk("age-seconds");
    ctx.reply.Bulk(fmt::format("{:.3f}", static_cast<double>(now - entry.created_ms) / 1000));
    ctx.reply.Bulk("client-info");
    ctx.reply.Bulk(entry.client);
    ctx.reply.Bulk("entry-id");
    ctx.reply.Integer(static_cast<int64_t>(entry.id));
    ctx.reply.Bulk("timestamp-created");
    ctx.reply.Integer(entry.created_ms);
    ctx.reply.Bulk("timestamp-last-updated");
    ctx.reply.Integer(entry.updated_ms);
  }
}

// ACL SAVE and LOAD use --aclfile.
void SaveOrLoad(CommandContext& ctx, bool save) {
  const std::string& path = ctx.server.options().aclfile;
  if (path.empty()) {
    ctx.reply.Error(
        "ERR This Redis instance is not configured to use an ACL file. You may want to "
        "specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming "
        "you have a Redis configuration file set) in order to store users in the Redis "
        "configuration.");
    return;
  }
  auto status = save ? ctx.server.acl().Save(path) : ctx.server.acl().Load(path);
  if (!status) {
    ctx.reply.Error("ERR " + status.error().message);
    return;
  }
  ctx.reply.SimpleString("OK");
}

}  // namespace

void AclCommand(CommandContext& ctx) {
  auth::Acl& acl = ctx.server.acl();
  const std::string_view sub = ctx.args[1];
  const size_t argc = ctx.args.size();
  if (EqualsIgnoreCase(sub, "SETUSER") && argc >= 3) {
    const std::vector<std::string> rules(ctx.args.begin() + 3, ctx.args.end());
    auto status = acl.SetUser(ctx.args[2], rules);
    if (!status) {
      ctx.reply.Error("ERR " + status.error().message);
      return;
    }
    ctx.reply.SimpleString("OK");
  } else if (EqualsIgnoreCase(sub, "GETUSER") && argc == 3) {
    const auto user = acl.Find(ctx.args[2]);
    if (user == nullptr) {
      ctx.reply.NullArray();
      return;
    }
    GetUser(ctx, *user);
  } else if (EqualsIgnoreCase(sub, "DELUSER") && argc >= 3) {
    int64_t deleted = 0;
    for (size_t i = 2; i < argc; ++i) {
      auto removed = acl.DeleteUser(ctx.args[i]);
      if (!removed) {
        ctx.reply.Error("ERR " + removed.error().message);
        return;
      }
      deleted += *removed ? 1 : 0;
    }
    ctx.reply.Integer(deleted);
  } else if ((EqualsIgnoreCase(sub, "LIST") || EqualsIgnoreCase(sub, "USERS")) && argc == 2) {
    const auto users = acl.Users();
    ctx.reply.ArrayHeader(users.size());
    const bool list = EqualsIgnoreCase(sub, "LIST");
    for (const auto& user : users) ctx.reply.Bulk(list ? user->Describe() : user->name());
  } else if (EqualsIgnoreCase(sub, "WHOAMI") && argc == 2) {
    ctx.reply.Bulk(ctx.session.user() == nullptr ? "default" : ctx.session.user()->name());
  } else if (EqualsIgnoreCase(sub, "CAT") && argc <= 3) {
    if (argc == 2) {
      ctx.reply.ArrayHeader(auth::AllCategories().size());
      for (const auto& category : auth::AllCategories()) ctx.reply.Bulk(category.name);
      return;
    }
    const auto category = std::ranges::find_if(auth::AllCategories(), [&](const auto& c) {
      return EqualsIgnoreCase(c.name, ctx.args[2]);
    });
    if (category == auth::AllCategories().end()) {
      ctx.reply.Error(fmt::format("ERR Unknown category '{}'", ctx.args[2]));
      return;
    }
    std::vector<std::string_view> names;
    for (const auto& command : AllCommands()) {
      if (CategoriesOf(command) & category->bit) names.push_back(command.name);
    }
    ctx.reply.ArrayHeader(names.size());
    for (const auto name : names) ctx.reply.Bulk(name);
  } else if (EqualsIgnoreCase(sub, "DRYRUN") && argc >= 4) {
    DryRun(ctx);
  } else if (EqualsIgnoreCase(sub, "GENPASS") && argc <= 3) {
    GenPass(ctx);
  } else if (EqualsIgnoreCase(sub, "LOG") && argc <= 3) {
    Log(ctx);
  } else if ((EqualsIgnoreCase(sub, "SAVE") || EqualsIgnoreCase(sub, "LOAD")) && argc == 2) {
    SaveOrLoad(ctx, EqualsIgnoreCase(sub, "SAVE"));
  } else if (EqualsIgnoreCase(sub, "HELP") && argc == 2) {
    static constexpr std::string_view kHelp[] = {
        "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CAT [<category>]",
        "    List all commands that belong to <category>, or all command categories",
        "    when no category is specified.",
        "DELUSER <username> [<username> ...]",
        "    Delete a list of users.",
        "DRYRUN <username> <command> [<arg> ...]",
        "    Test whether the user could run the command, without running it.",
        "GENPASS [<bits>]",
        "    Generate a secure password of <bits> bits (256 by default), in hex.",
        "GETUSER <username>",
        "    Get the user's details.",
        "LIST",
        "    Show users details in config file format.",
        "LOAD",
        "    Reload users from the ACL file.",
        "LOG [<count> | RESET]",
        "    Show the ACL log entries.",
        "SAVE",
        "    Save the current config to the ACL file.",
        "SETUSER <username> <attribute> [<attribute> ...]",
        "    Create or modify a user with the specified attributes.",
        "USERS",
        "    List all the registered usernames.",
        "WHOAMI",
        "    Return the current connection username.",
        "HELP",
        "    Print this help."};
    ctx.reply.ArrayHeader(std::size(kHelp));
    for (const std::string_view line : kHelp) ctx.reply.SimpleString(line);
  } else {
    ReplyUnknownSubcommand(ctx, "ACL");
  }
}

}  // namespace commands
}  // namespace tally::redis
