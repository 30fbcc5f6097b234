// Session: one client's protocol state (RESP version, authentication, name, MULTI queue)
// and the dispatcher that runs its requests. It does no I/O: requests come in as argument
// lists, replies go out as bytes in output(), so it can be driven without sockets.
//
// Increments outside MULTI are not applied at once: they go to the worker's IncrementBuffer
// (its WorkerShard) and leave a hole in the output where their reply will go. The shard folds
// the buffer (once per event-loop turn, or earlier when a command needs to see the keys) and
// calls FillHoles(). A reply may leave only once required_epoch() is durable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/increment_buffer.h"
#include "engine/subscriptions.h"
#include "servers/auth/acl.h"
#include "servers/redis/command_table.h"
#include "servers/redis/resp_writer.h"
#include "servers/redis/server_core.h"
#include "servers/redis/worker_shard.h"

namespace tally::redis {

// A session's pub/sub state (commands/pubsub.cc): what it follows, and its subscriber in
// the server's SubscriptionHub. Channels and patterns are kept in their stored form
// (engine/databases.h: prefixed with the database they were subscribed in, when not 0).
struct PubSubState {
  engine::SubscriberId subscriber = 0;  // 0 until the first SUBSCRIBE or PSUBSCRIBE
  std::set<std::string> channels;       // exact keys
  std::set<std::string> patterns;       // "prefix*"
};

class Session {
 public:
  // `core` and `shard` must outlive the session.
  Session(ServerCore& core, WorkerShard& shard, std::shared_ptr<ClientInfo> info);
  ~Session();  // Ends the subscriptions.
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs one request (args[0] is the command name); replies are appended to output().
  void Execute(std::span<const std::string_view> args);

  // Answers a protocol error; the connection must close once the reply is sent.
  void ProtocolError(std::string_view message);

  std::string& output() { return output_; }
  bool has_holes() const { return !holes_.empty(); }

  // Writes the outcomes of this session's queued increments into the output. Called by
  // the shard after IncrementBuffer::Publish(), which returned `epoch`.
  void FillHoles(const engine::IncrementBuffer& buffer, uint64_t epoch);

  // The commit epoch that must be durable before the output may be sent.
  uint64_t required_epoch() const { return required_epoch_; }
  bool close_requested() const { return close_requested_; }

  // For handlers.
  ClientInfo& info() { return *info_; }
  int protocol() const { return writer_.protocol(); }
  void set_protocol(int protocol);
  // The selected database (SELECT; engine/databases.h). Keys of commands run in it.
  uint32_t db() const { return db_; }
  void set_db(uint32_t db);
  // The user the session runs as: null until AUTH when the default user needs a password.
  bool authenticated() const { return user_ != nullptr; }
  const auth::User* user() const { return user_.get(); }
  void set_user(std::shared_ptr<const auth::User> user);
  // Adds a refusal or a failed AUTH to ACL LOG, with this client's description. The
  // context is "multi" for commands queued in a transaction (refused when queued, or when
  // EXEC checks them again), "toplevel" otherwise.
  void LogAcl(std::string_view reason, std::string object, std::string_view username);
  void LogAcl(std::string_view reason, std::string object, std::string_view username,
              std::string_view context);
  // For the commands whose keys are known only once they run (the derived counters' reads):
  // true, after answering -NOPERM (and logging it), when the user may not read `key` (with
  // `prefix`, every key that starts with it).
  bool RefusedRead(std::string_view key, bool prefix);
  // Whether the user may read `key` (a subscription's update is sent only then).
  bool MayRead(std::string_view key) const {
    return !acl_checks_ || (user_ != nullptr && user_->CanAccess(key, auth::kReadKey));
  }
  void RequestClose() { close_requested_ = true; }
  void RaiseRequiredEpoch(uint64_t epoch) { required_epoch_ = std::max(required_epoch_, epoch); }
  // Cluster mode: READONLY lets this connection read the slots this node follows.
  bool readonly() const { return readonly_; }
  void set_readonly(bool readonly) { readonly_ = readonly; }
  // MULTI / EXEC / DISCARD / RESET.
  bool in_multi() const { return in_multi_; }
  void BeginMulti();
  void ClearMulti();
  void RunExec();

  // Pub/sub. The connection says how to make the sink its updates go to; the subscriber is
  // registered with the hub on first use (0 when the server offers no subscriptions).
  void set_sink_factory(std::function<std::shared_ptr<engine::SubscriberSink>()> factory) {
    sink_factory_ = std::move(factory);
  }
  PubSubState& pubsub() { return pubsub_; }
  engine::SubscriberId EnsureSubscriber();
  // Channels plus patterns: while not 0, RESP2 takes only pub/sub commands, as in Redis.
  size_t subscription_count() const { return pubsub_.channels.size() + pubsub_.patterns.size(); }
  // Appends a "message" per followed channel and a "pmessage" per matching pattern; an
  // unchanged current value a new subscription asked for (delivery's only_for) goes to
  // that subscription alone.
  void PushUpdates(const engine::SubscriptionDelivery& delivery);
  // Forgets every subscription and the hub's subscriber (RESET, the connection's end).
  void EndSubscriptions();

 private:
  struct Hole {
    size_t offset;    // where in output_ the reply goes
    uint32_t ticket;  // the increment's ticket in the worker's IncrementBuffer
  };

  // Hashes the key arguments at key_positions_, in their stored form in the selected
  // database, into keys_, once per request.
  void HashKeys(std::span<const std::string_view> args);
  // Runs a validated command: locks its keys (unless `held` already holds every stripe) and
  // calls the handler. REQUIRES: HashKeys() for this request.
  void Run(const CommandSpec& spec, std::span<const std::string_view> args, engine::View* held);
  // Queues a plain increment in the worker's buffer (or replies why the amount is bad).
  void QueueIncrement(const CommandSpec& spec, std::span<const std::string_view> args);
  // Looks the session's user up again when the users changed since (ACL SETUSER, DELUSER,
  // LOAD): one deleted or turned off leaves the session signed out.
  void RefreshUser();
  // True, after refusing the command with -NOPERM (and logging it), when the user may not
  // run it on these keys.
  bool RefusedByAcl(const CommandSpec& spec, std::span<const std::string_view> args,
                    std::span<const size_t> key_positions);
  // Why the command may not touch its keys in database `db`, or empty: a key reserved for
  // other databases (any command in database 0), or a derived counter's key (writes in
  // database 0, where derived counters live).
  std::string KeyRefusal(const CommandSpec& spec, std::span<const std::string_view> args,
                         std::span<const size_t> key_positions, uint32_t db) const;
  // Cluster mode: why this request may not run on this node (MOVED, TRYAGAIN, CROSSSLOT,
  // CLUSTERDOWN, a key too long for a partition's stream ...), or empty. Inside MULTI every
  // queued command must use the slot of the first one.
  std::string ClusterRedirect(const CommandSpec& spec, std::span<const std::string_view> args,
                              std::span<const size_t> key_positions);
  // True when a command must see the effect of increments still in the buffer.
  bool NeedsFold(const CommandSpec& spec);
  void RejectUnknown(std::span<const std::string_view> args);
  // Answers `error` for a command refused before it ran.
  void Reject(const CommandSpec& spec, std::string_view error);

  ServerCore& core_;
  WorkerShard& shard_;
  std::shared_ptr<ClientInfo> info_;
  std::string output_;
  ReplyWriter writer_;
  std::vector<Hole> holes_;
  uint64_t required_epoch_ = 0;
  std::shared_ptr<const auth::User> user_;
  uint64_t acl_version_ = 0;  // of the Acl when user_ was looked up
  // The user is restricted: each command is checked against it. False for a user with every
  // permission on every key (the default user of a server without users), whose commands
  // skip the check, and for no user (only AUTH, HELLO, QUIT and RESET run then).
  bool acl_checks_ = false;
  bool close_requested_ = false;
  uint32_t db_ = 0;
  bool readonly_ = false;
  // Cluster mode, inside MULTI: the slot of the queued commands' keys (the first keyed one's).
  std::optional<uint32_t> multi_slot_;
  bool in_multi_ = false;
  uint32_t queued_db_ = 0;  // the database queued commands will run in, as far as SELECTs tell
  bool multi_failed_ = false;
  struct QueuedCommand {
    const CommandSpec* spec;
    std::vector<std::string> args;
  };
  std::vector<QueuedCommand> multi_queue_;
  PubSubState pubsub_;
  std::function<std::shared_ptr<engine::SubscriberSink>()> sink_factory_;
  // The command this session ran last: a client mostly repeats one, and comparing its name
  // is cheaper than looking it up (a tenth of a small request's instructions).
  const CommandSpec* last_command_ = nullptr;
  // Scratch, reused by every request.
  std::vector<size_t> key_positions_;
  std::vector<engine::HashedKey> keys_;
  std::vector<std::string> stored_keys_;  // what keys_ point into outside database 0
  std::string stored_increment_key_;
};

}  // namespace tally::redis
