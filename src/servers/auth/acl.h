// Users and permissions in Redis's ACL vocabulary, shared by the Redis and HTTP servers.
//
// A User is immutable: ACL SETUSER builds a new one from the old and its rules (all or
// nothing, as Redis), and the Acl swaps it in. Sessions hold the User they authenticated as
// and look it up again when version() moved (a changed user applies at once; a deleted or
// disabled one ends its sessions' rights).
//
// Rules (ACL SETUSER, the aclfile): on off | nopass resetpass >pw <pw #sha256 !sha256 |
// ~pattern %R~pattern %W~pattern %RW~pattern allkeys resetkeys | +@category -@category
// allcommands nocommands +command -command | &pattern allchannels resetchannels (accepted
// for Redis's files; tally's channels are its keys, governed by the key patterns) | reset.
// Passwords are kept as SHA-256 digests (Redis's, so its aclfiles' #hashes carry over) and
// compared in constant time.
//
// Thread-safety: Acl is thread-safe; Users are immutable and shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tally::auth {

// Command categories (ACL CAT): Redis's where tally has such commands, and tally's own
// @definitions (defining and dropping derived counters) and @push (changes pushed to them).
enum Category : uint32_t {
  kRead = 1u << 0,
  kWrite = 1u << 1,
  kAdmin = 1u << 2,
  kPubSub = 1u << 3,
  kKeyspace = 1u << 4,
  kString = 1u << 5,
  kFast = 1u << 6,
  kSlow = 1u << 7,
  kConnection = 1u << 8,
  kTransaction = 1u << 9,
  kDangerous = 1u << 10,
  kDefinitions = 1u << 11,
  kPush = 1u << 12,
};
struct CategoryName {
  std::string_view name;  // without the @
  uint32_t bit;
};
std::span<const CategoryName> AllCategories();

// A command an Acl governs: its lower-case name and its categories. Ids are indexes into
// the list given to the Acl.
struct CommandInfo {
  std::string name;
  uint32_t categories = 0;
};

enum KeyAccess : uint8_t { kReadKey = 1, kWriteKey = 2 };

// What both servers answer to a password from an address past its failed-password limit
// (Acl::AuthBlocked).
inline constexpr std::string_view kTooManyAuthFailures =
    "too many failed authentication attempts from this address; try again in a minute";

// SHA-256 of a password, as 64 lower-case hex digits.
std::string HashPassword(std::string_view password);

class User {
 public:
  const std::string& name() const { return name_; }
  bool enabled() const { return enabled_; }
  // Every command on every key: no check needed (the default user, +@all ~*).
  bool unrestricted() const { return unrestricted_; }
  bool nopass() const { return nopass_; }
  // True when the user is on and `password` is one of its passwords (any, with nopass).
  bool CheckPassword(std::string_view password) const;
  bool CanRun(size_t command) const { return command < commands_.size() && commands_[command]; }
  // `access`: kReadKey, kWriteKey or both.
  bool CanAccess(std::string_view key, uint8_t access) const;
  // Every key, for commands that span the keyspace (SCAN, KEYS, FLUSHALL...).
  bool CanAccessAll(uint8_t access) const;
  // Every key that starts with `prefix` may be read: a read pattern "*" or "<p>*" whose
  // <p> (no wildcard in it) begins `prefix` (a subscription to a key prefix).
  bool CanReadPrefix(std::string_view prefix) const;
  // As ACL LIST shows it: "user alice on #<sha256> ~likes:* resetchannels -@all +@read".
  std::string Describe() const;
  // ACL GETUSER's parts.
  std::vector<std::string> flags() const;
  const std::vector<std::string>& password_hashes() const { return hashes_; }
  std::string CommandRules() const;
  std::string KeyRules() const;

 private:
  friend class Acl;
  struct KeyPattern {
    std::string pattern;
    uint8_t access;
  };

  std::string name_;
  bool enabled_ = false;
  bool nopass_ = false;
  std::vector<std::string> hashes_;
  std::vector<bool> commands_;              // by command id
  std::vector<std::string> command_rules_;  // as given since the last +@all / -@all
  bool base_all_ = false;                   // the rules start from +@all (else -@all)
  std::vector<KeyPattern> keys_;
  bool unrestricted_ = false;  // set by Acl::Finish
};

// One refusal or failed AUTH, as ACL LOG shows it.
struct AclLogEntry {
  uint64_t id = 0;
  int64_t count = 1;
  std::string reason;   // auth, command, key
  std::string context;  // toplevel, multi
  std::string object;   // the command, the key, or AUTH
  std::string username;
  std::string client;  // the client's description (id=... addr=...)
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

class Acl {
 public:
  // `commands`: what the rules name. The default user is "on nopass ~* &* +@all", or, with
  // `requirepass`, that password instead of nopass.
  Acl(std::vector<CommandInfo> commands, std::string requirepass);

  // ACL SETUSER: creates the user (off, no rights) when missing, then applies every rule,
  // or none when one is bad: "Error in ACL SETUSER modifier '<rule>': <why>".
  Status SetUser(std::string_view name, std::span<const std::string> rules);
  // ACL DELUSER: false for a missing user. The default user cannot be deleted (an error).
  Result<bool> DeleteUser(std::string_view name);
  std::shared_ptr<const User> Find(std::string_view name) const;
  std::vector<std::shared_ptr<const User>> Users() const;  // by name

  // The user `name` when `password` is right and the user is on, else null.
  std::shared_ptr<const User> Authenticate(std::string_view name, std::string_view password) const;
  // The default user when it is on and needs no password: a new connection is it at once.
  // (Protected mode's "open".)
  std::shared_ptr<const User> OpenDefault() const;

  // Moves on every change of any user.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

  // The aclfile: lines "user <name> <rules...>" (# comments and blank lines skipped).
  // Load replaces every user at once (the default user stays as it was when the file does
  // not name it); an error names the line and changes nothing. Save writes every user, mode 0600
  // (a temporary file renamed over the old one).
  Status Load(const std::string& path);
  Status Save(const std::string& path) const;

  const std::vector<CommandInfo>& commands() const { return commands_; }
  // The id of a command name (any case), or -1.
  int CommandId(std::string_view name) const;

  // Failed AUTHs, per client address (its IP): at most `limit` a minute (0 = no limit).
  // Past it, AuthBlocked() is true until that minute is over: the servers refuse AUTH from
  // the address without checking the password, so guessing costs a minute per `limit`.
  // At most kMaxFailingAddresses addresses are counted at once (bounded memory).
  void set_max_auth_failures(int64_t limit) { max_auth_failures_ = limit; }
  bool AuthBlocked(std::string_view address, int64_t now_ms) const;
  void AuthFailed(std::string_view address, int64_t now_ms);

  // ACL LOG: newest first, at most kLogSize; an entry like one of the last 60 s (same
  // reason, context, object and user) counts up instead of being added.
  static constexpr size_t kLogSize = 128;
  void Log(AclLogEntry entry, int64_t now_ms);
  std::vector<AclLogEntry> LogEntries(size_t count) const;
  void ResetLog();

 private:
  Status Apply(User& user, std::string_view rule) const;
  Status ApplyRules(User& user, std::span<const std::string> rules) const;
  void Allow(User& user, uint32_t categories, bool allow) const;
  // Freezes a user built by rules: works out unrestricted().
  static std::shared_ptr<const User> Finish(User user);
  User DefaultUser(const std::string& requirepass) const;

  const std::vector<CommandInfo> commands_;
  mutable std::shared_mutex mutex_;
  std::map<std::string, std::shared_ptr<const User>, std::less<>> users_;  // guarded by mutex_
  std::atomic<uint64_t> version_{1};
  struct Failures {
    int64_t window_start_ms = 0;
    int64_t count = 0;
  };
  std::atomic<int64_t> max_auth_failures_{0};
  mutable std::mutex failures_mutex_;
  static constexpr size_t kMaxFailingAddresses = 100000;
  std::map<std::string, Failures, std::less<>> failures_;  // guarded by failures_mutex_
  int64_t last_sweep_ms_ = 0;                              // guarded by failures_mutex_

  mutable std::mutex log_mutex_;
  std::vector<AclLogEntry> log_;  // guarded by log_mutex_, newest first
  uint64_t next_log_id_ = 0;      // guarded by log_mutex_
};

}  // namespace tally::auth
