#include "servers/redis/session.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/integer.h"
#include "servers/redis/acl_commands.h"
#include "servers/redis/cluster_redirect.h"
#include "servers/redis/command_args.h"

namespace tally::redis {
namespace {

constexpr std::string_view kOverflow = "ERR increment or decrement would overflow";
constexpr std::string_view kNoPermKey = "NOPERM No permissions to access a key";
// The longest key a cluster node writes: a record of a partition's stream holds a whole key
// (and a NATS message is at most 1 MiB).
constexpr size_t kMaxClusterKeyBytes = 64 * 1024;

bool IsTransactionControl(const CommandSpec& spec) {
  return spec.handler == commands::Multi || spec.handler == commands::Exec ||
         spec.handler == commands::Discard || spec.handler == commands::Quit ||
         spec.handler == commands::Reset;
}

}  // namespace

Session::Session(ServerCore& core, WorkerShard& shard, std::shared_ptr<ClientInfo> info)
    : core_(core), shard_(shard), info_(std::move(info)), writer_(&output_, 2) {
  writer_.set_error_tally(&shard_.stats().errors);
  set_user(core.acl().OpenDefault());
}

void Session::set_user(std::shared_ptr<const auth::User> user) {
  acl_version_ = core_.acl().version();
  user_ = std::move(user);
  acl_checks_ = user_ != nullptr && !user_->unrestricted();
}

void Session::RefreshUser() {
  if (user_ == nullptr || acl_version_ == core_.acl().version()) return;
  // A user changed: this session's is looked up again (gone or off: it must AUTH again).
  auto current = core_.acl().Find(user_->name());
  set_user(current != nullptr && current->enabled() ? std::move(current) : nullptr);
}

void Session::LogAcl(std::string_view reason, std::string object, std::string_view username) {
  LogAcl(reason, std::move(object), username, in_multi_ ? "multi" : "toplevel");
}

void Session::LogAcl(std::string_view reason, std::string object, std::string_view username,
                     std::string_view context) {
  auth::AclLogEntry entry;
  entry.reason = std::string(reason);
  entry.context = std::string(context);
  entry.object = std::move(object);
  entry.username = std::string(username);
  entry.client = fmt::format("id={} addr={} laddr={} user={}", info_->id, info_->address,
                             info_->local_address, username);
  core_.acl().Log(std::move(entry), core_.engine().keyspace().clock()->NowMillis());
}

bool Session::RefusedByAcl(const CommandSpec& spec, std::span<const std::string_view> args,
                           std::span<const size_t> key_positions) {
  const auto refusal = CheckPermission(*user_, spec, args, key_positions);
  if (!refusal) return false;
  LogAcl(refusal->reason, refusal->object, user_->name());
  if (refusal->reason == "command") {
    Reject(spec, fmt::format("NOPERM User {} has no permissions to run the '{}' command",
                             user_->name(), spec.name));
  } else if (spec.name == "subscribe") {
    Reject(spec, "NOPERM No permissions to access a channel");
  } else {
    Reject(spec, kNoPermKey);
  }
  return true;
}

bool Session::RefusedRead(std::string_view key, bool prefix) {
  if (!acl_checks_) return false;
  if (prefix ? user_->CanReadPrefix(key) : user_->CanAccess(key, auth::kReadKey)) return false;
  LogAcl("key", prefix ? fmt::format("{}*", key) : std::string(key), user_->name());
  writer_.Error(kNoPermKey);
  return true;
}

Session::~Session() {
  if (!holes_.empty()) shard_.Forget(this);
  EndSubscriptions();
}

void Session::set_protocol(int protocol) {
  writer_.set_protocol(protocol);
  info_->protocol.store(protocol, std::memory_order_relaxed);
}

void Session::ProtocolError(std::string_view message) {
  writer_.Error(fmt::format("ERR {}", message));
  close_requested_ = true;
}

void Session::RejectUnknown(std::span<const std::string_view> args) {
  // Redis's spelling: the name as sent, then up to ~128 bytes of quoted arguments.
  std::string quoted;
  for (size_t i = 1; i < args.size() && quoted.size() < 128; ++i) {
    fmt::format_to(std::back_inserter(quoted), "'{}' ",
                   args[i].substr(0, 128 - std::min<size_t>(quoted.size(), 128)));
  }
  writer_.Error(fmt::format("ERR unknown command '{}', with args beginning with: {}",
                            args[0].substr(0, 128), quoted));
}

void Session::Reject(const CommandSpec& spec, std::string_view error) {
  // As Redis: a refused command dooms an open transaction; a refused EXEC ends it (and is
  // answered EXECABORT even outside MULTI).
  if (spec.handler == commands::Exec) {
    ClearMulti();
    const std::string_view reason = error.starts_with("ERR ") ? error.substr(4) : error;
    writer_.Error(fmt::format("EXECABORT Transaction discarded because of: {}", reason));
    return;
  }
  if (in_multi_) multi_failed_ = true;
  writer_.Error(error);
}

void Session::Execute(std::span<const std::string_view> args) {
  WorkerStats::Bump(shard_.stats().commands);
  const CommandSpec* spec =
      last_command_ != nullptr && EqualsIgnoreCase(args[0], last_command_->name)
          ? last_command_
          : FindCommand(args[0]);
  if (spec != nullptr) last_command_ = spec;
  if (spec == nullptr) {
    if (in_multi_) multi_failed_ = true;
    RejectUnknown(args);
    return;
  }
  const int argc = static_cast<int>(args.size());
  if ((spec->arity > 0 && argc != spec->arity) || (spec->arity < 0 && argc < -spec->arity)) {
    Reject(*spec, fmt::format("ERR wrong number of arguments for '{}' command", spec->name));
    return;
  }
  RefreshUser();
  if (user_ == nullptr && !(spec->flags & kNoAuth)) {
    Reject(*spec, "NOAUTH Authentication required.");
    return;
  }
  if (protocol() == 2 && subscription_count() > 0 && (spec->flags & kPubSub) == 0) {
    Reject(*spec, fmt::format("ERR Can't execute '{}': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / "
                              "PING / QUIT / RESET are allowed in this context",
                              spec->name));
    return;
  }
  WorkerStats::Bump(shard_.stats().calls[spec - AllCommands().data()]);
  info_->last_command.store(spec, std::memory_order_relaxed);

  // Key positions once per request: the protected-key check and the lock both use them.
  // A plain increment's one key is args[1], so its hot path needs no position list.
  static constexpr size_t kIncrementKey[] = {1};
  const bool increment = (spec->flags & kIncrement) != 0;
  if (!increment) KeyPositions(*spec, args.size(), &key_positions_);
  const std::span<const size_t> positions =
      increment ? std::span<const size_t>(kIncrementKey) : key_positions_;
  // AUTH, HELLO, QUIT and RESET are everyone's (they change who one is, not what).
  if (acl_checks_ && (spec->flags & kNoAuth) == 0 && RefusedByAcl(*spec, args, positions)) {
    return;
  }
  const std::string refusal = KeyRefusal(*spec, args, positions, in_multi_ ? queued_db_ : db_);
  if (!refusal.empty()) {
    Reject(*spec, refusal);
    return;
  }
  if (core_.cluster() != nullptr) {
    const std::string redirect = ClusterRedirect(*spec, args, positions);
    if (!redirect.empty()) {
      Reject(*spec, redirect);
      return;
    }
  }

  if (in_multi_ && !IsTransactionControl(*spec)) {
    if (spec->flags & kNoMulti) {
      multi_failed_ = true;
      writer_.Error("ERR Command not allowed inside a transaction");
      return;
    }
    // A queued SELECT moves the commands queued after it (EXEC checks their keys again).
    if (spec->handler == commands::Select) {
      if (const auto db = commands::DatabaseIndex(args[1], core_.options().databases)) {
        queued_db_ = *db;
      }
    }
    multi_queue_.push_back({spec, std::vector<std::string>(args.begin(), args.end())});
    writer_.SimpleString("QUEUED");
    return;
  }
  if (increment) {
    QueueIncrement(*spec, args);
    return;
  }
  HashKeys(args);
  if (NeedsFold(*spec)) shard_.FoldIncrements();
  Run(*spec, args, nullptr);
}

void Session::set_db(uint32_t db) {
  db_ = db;
  info_->db.store(db, std::memory_order_relaxed);
}

void Session::HashKeys(std::span<const std::string_view> args) {
  keys_.clear();
  if (db_ == 0) {
    for (const size_t position : key_positions_) keys_.emplace_back(args[position]);
    return;
  }
  // Every stored key first, then the views into them (a growing vector moves its strings).
  stored_keys_.resize(key_positions_.size());
  for (size_t i = 0; i < key_positions_.size(); ++i) {
    engine::StoreKeyInto(db_, args[key_positions_[i]], &stored_keys_[i]);
  }
  for (const std::string& key : stored_keys_) keys_.emplace_back(key);
}

std::string Session::KeyRefusal(const CommandSpec& spec, std::span<const std::string_view> args,
                                std::span<const size_t> key_positions, uint32_t db) const {
  if (db != 0) return {};  // derived counters and tally's own records live in database 0
  for (const size_t position : key_positions) {
    if (engine::IsReservedKey(args[position]))
      return fmt::format("ERR {}", engine::kReservedKeyMessage);
  }
  const derived::DerivedCounters* derived = core_.derived();
  if (derived == nullptr || (spec.flags & kWrite) == 0) return {};
  for (const size_t position : key_positions) {
    if (derived->IsProtectedKey(args[position])) return derived->ProtectedKeyError(args[position]);
  }
  return {};
}

std::string Session::ClusterRedirect(const CommandSpec& spec,
                                     std::span<const std::string_view> args,
                                     std::span<const size_t> key_positions) {
  if (key_positions.empty()) return ClusterKeylessRefusal(spec, args);
  if ((spec.flags & kWrite) != 0) {
    for (const size_t position : key_positions) {
      if (args[position].size() > kMaxClusterKeyBytes) {
        return fmt::format("ERR key too long for a cluster (at most {} bytes)",
                           kMaxClusterKeyBytes);
      }
    }
  }
  const KeysSlot keys = SlotOfKeys(args, key_positions);
  if (!keys.error.empty()) return keys.error;
  if (in_multi_ && !IsTransactionControl(spec)) {
    if (multi_slot_ && *multi_slot_ != keys.slot) {
      return "CROSSSLOT Keys in request don't hash to the same slot";
    }
    multi_slot_ = keys.slot;
  }
  return ClusterRefusal(*core_.cluster(), keys.slot, (spec.flags & kWrite) != 0, readonly_);
}

bool Session::NeedsFold(const CommandSpec& spec) {
  if (shard_.increments().empty()) return false;
  if (spec.handler == commands::Exec) return true;
  if ((spec.flags & (kReadOnly | kWrite)) == 0) return false;
  if (spec.first_key == 0) return true;  // whole-keyspace commands: SCAN, DBSIZE, FLUSHALL
  return std::ranges::any_of(
      keys_, [&](const engine::HashedKey& key) { return shard_.increments().Contains(key); });
}

void Session::QueueIncrement(const CommandSpec& spec, std::span<const std::string_view> args) {
  const bool negate = spec.handler == commands::Decr || spec.handler == commands::DecrBy;
  const std::optional<int64_t> delta = IncrementAmount(args, negate, writer_);
  if (!delta) return;
  std::string_view key = args[1];
  if (db_ != 0) {
    engine::StoreKeyInto(db_, key, &stored_increment_key_);
    key = stored_increment_key_;
  }
  const uint32_t ticket = shard_.increments().Add(engine::HashedKey(key), *delta);  // copies
  if (holes_.empty()) shard_.AwaitFold(this);
  holes_.push_back(Hole{output_.size(), ticket});
}

void Session::FillHoles(const engine::IncrementBuffer& buffer, uint64_t epoch) {
  if (holes_.empty()) return;
  RaiseRequiredEpoch(epoch);
  std::string filled;
  filled.reserve(output_.size() + holes_.size() * 24);
  ReplyWriter writer(&filled, protocol());
  writer.set_error_tally(&shard_.stats().errors);
  size_t copied = 0;
  for (const Hole& hole : holes_) {
    filled.append(output_, copied, hole.offset - copied);
    copied = hole.offset;
    const engine::IncrementOutcome& outcome = buffer.outcome(hole.ticket);
    if (outcome.overflow) {
      writer.Error(kOverflow);
    } else {
      writer.Integer(outcome.value);
    }
  }
  filled.append(output_.data() + copied, output_.size() - copied);
  output_.swap(filled);
  holes_.clear();
}

void Session::Run(const CommandSpec& spec, std::span<const std::string_view> args,
                  engine::View* held) {
  engine::Keyspace& keyspace = core_.engine().keyspace();
  std::optional<engine::View> view;
  engine::View* active = held;
  if (held == nullptr) {
    if ((spec.flags & kAllStripes) != 0) {
      view.emplace(keyspace.LockAll());
    } else if (!keys_.empty()) {
      view.emplace(keys_.size() == 1 ? keyspace.Lock(keys_[0]) : keyspace.Lock(keys_));
    }
    if (view) active = &*view;
  }
  CommandContext ctx{args, keys_, writer_, *this, core_, active};
  spec.handler(ctx);
  if (view) RaiseRequiredEpoch(view->required_epoch());
}

void Session::BeginMulti() {
  in_multi_ = true;
  multi_slot_.reset();
  queued_db_ = db_;
  multi_failed_ = false;
  multi_queue_.clear();
  info_->in_multi.store(true, std::memory_order_relaxed);
}

void Session::ClearMulti() {
  in_multi_ = false;
  multi_slot_.reset();
  multi_failed_ = false;
  multi_queue_.clear();
  info_->in_multi.store(false, std::memory_order_relaxed);
}

void Session::RunExec() {
  if (!in_multi_) {
    writer_.Error("ERR EXEC without MULTI");
    return;
  }
  if (multi_failed_) {
    ClearMulti();
    writer_.Error("EXECABORT Transaction discarded because of previous errors.");
    return;
  }
  // In a cluster the slot may have changed hands since the commands were queued.
  if (multi_slot_ && core_.cluster() != nullptr) {
    const bool writes = std::ranges::any_of(multi_queue_, [](const QueuedCommand& queued) {
      return (queued.spec->flags & kWrite) != 0;
    });
    if (std::string redirect = ClusterRefusal(*core_.cluster(), *multi_slot_, writes, readonly_);
        !redirect.empty()) {
      ClearMulti();
      writer_.Error(redirect);
      return;
    }
  }
  // Every stripe at once: the queued commands are seen together by every reader, and the
  // committer drains them into one batch, so they become durable together or not at all.
  auto queue = std::move(multi_queue_);
  ClearMulti();
  engine::View all = core_.engine().keyspace().LockAll();
  writer_.ArrayHeader(queue.size());
  std::vector<std::string_view> args;
  for (const QueuedCommand& queued : queue) {
    args.assign(queued.args.begin(), queued.args.end());
    KeyPositions(*queued.spec, args.size(), &key_positions_);
    // As Redis: the permissions are checked again (Execute looked the user up again for
    // EXEC), in case they changed since the command was queued.
    if (acl_checks_ && (queued.spec->flags & kNoAuth) == 0) {
      if (const auto refusal = CheckPermission(*user_, *queued.spec, args, key_positions_)) {
        LogAcl(refusal->reason, refusal->object, user_->name(), "multi");
        writer_.Error(
            "NOPERM ACLs rules changed between the moment the transaction was accumulated and "
            "its execution");
        continue;
      }
    }
    // The database may differ from the one checked at queueing (a SELECT that failed).
    if (const std::string refusal = KeyRefusal(*queued.spec, args, key_positions_, db_);
        !refusal.empty()) {
      writer_.Error(refusal);
      continue;
    }
    HashKeys(args);
    Run(*queued.spec, args, &all);
  }
  RaiseRequiredEpoch(all.required_epoch());
}

namespace commands {

void Multi(CommandContext& ctx) {
  if (ctx.session.in_multi()) {
    ctx.reply.Error("ERR MULTI calls can not be nested");
    return;
  }
  ctx.session.BeginMulti();
  ctx.reply.SimpleString("OK");
}

void Exec(CommandContext& ctx) { ctx.session.RunExec(); }

void Discard(CommandContext& ctx) {
  if (!ctx.session.in_multi()) {
    ctx.reply.Error("ERR DISCARD without MULTI");
    return;
  }
  ctx.session.ClearMulti();
  ctx.reply.SimpleString("OK");
}

// WATCH is not offered (a tally transaction runs under every stripe lock, so optimistic
// check-and-set has nothing to watch for; pretending to watch would hide lost updates).
// UNWATCH, which clients send on reset, is a harmless no-op.
void Unwatch(CommandContext& ctx) { ctx.reply.SimpleString("OK"); }

}  // namespace commands

}  // namespace tally::redis
