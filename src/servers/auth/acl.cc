#include "servers/auth/acl.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/constant_time.h"
#include "core/glob.h"

namespace tally::auth {
namespace {

constexpr CategoryName kCategories[] = {
    {"read", kRead},
    {"write", kWrite},
    {"admin", kAdmin},
    {"pubsub", kPubSub},
    {"keyspace", kKeyspace},
    {"string", kString},
    {"fast", kFast},
    {"slow", kSlow},
    {"connection", kConnection},
    {"transaction", kTransaction},
    {"dangerous", kDangerous},
    {"definitions", kDefinitions},
    {"push", kPush},
    // Redis's categories of data types and features tally has no command of: accepted (an
    // aclfile written for Redis loads), and they grant nothing.
    {"bitmap", 0},
    {"blocking", 0},
    {"geo", 0},
    {"hash", 0},
    {"hyperloglog", 0},
    {"list", 0},
    {"scripting", 0},
    {"set", 0},
    {"sortedset", 0},
    {"stream", 0},
};

std::string Lower(std::string_view text) {
  std::string lower(text);
  std::ranges::transform(lower, lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower;
}

bool IsHash(std::string_view text) {
  return text.size() == 64 && std::ranges::all_of(text, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// "%R~", "%W~", "%RW~" (any case, either order) to its access bits; 0 when malformed.
uint8_t PercentAccess(std::string_view flags) {
  uint8_t access = 0;
  for (const char c : flags) {
    if (c == 'R' || c == 'r') {
      access |= kReadKey;
    } else if (c == 'W' || c == 'w') {
      access |= kWriteKey;
    } else {
      return 0;
    }
  }
  return access;
}

// Splits a line of the aclfile at spaces.
std::vector<std::string> Words(std::string_view line) {
  std::vector<std::string> words;
  std::istringstream in{std::string(line)};
  for (std::string word; in >> word;) words.push_back(std::move(word));
  return words;
}

}  // namespace

std::span<const CategoryName> AllCategories() { return kCategories; }

std::string HashPassword(std::string_view password) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(password.data(), password.size(), digest, &length, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i)
    fmt::format_to(std::back_inserter(hex), "{:02x}", digest[i]);
  return hex;
}

bool User::CheckPassword(std::string_view password) const {
  if (!enabled_) return false;
  if (nopass_) return true;
  const std::string hash = HashPassword(password);
  bool found = false;
  for (const std::string& known : hashes_) found |= ConstantTimeEquals(hash, known);
  return found;
}

bool User::CanAccess(std::string_view key, uint8_t access) const {
  uint8_t granted = 0;
  for (const KeyPattern& pattern : keys_) {
    if ((pattern.access & access) != 0 && GlobMatch(pattern.pattern, key)) {
      granted |= pattern.access & access;
      if (granted == access) return true;
    }
  }
  return false;
}

bool User::CanAccessAll(uint8_t access) const {
  uint8_t granted = 0;
  for (const KeyPattern& pattern : keys_) {
    if (pattern.pattern == "*") granted |= pattern.access;
  }
  return (granted & access) == access;
}

bool User::CanReadPrefix(std::string_view prefix) const {
  return std::ranges::any_of(keys_, [&](const KeyPattern& key) {
    if ((key.access & kReadKey) == 0 || !key.pattern.ends_with('*')) return false;
    const std::string_view head = std::string_view(key.pattern).substr(0, key.pattern.size() - 1);
    return head.find_first_of("*?[\\") == std::string_view::npos && prefix.starts_with(head);
  });
}

std::vector<std::string> User::flags() const {
  std::vector<std::string> flags = {enabled_ ? "on" : "off"};
  if (nopass_) flags.emplace_back("nopass");
  return flags;
}

std::string User::CommandRules() const {
  std::string rules = base_all_ ? "+@all" : "-@all";
  for (const std::string& rule : command_rules_) rules += " " + rule;
  return rules;
}

std::string User::KeyRules() const {
  std::string rules;
  for (const KeyPattern& pattern : keys_) {
    if (!rules.empty()) rules += ' ';
    if (pattern.access == (kReadKey | kWriteKey)) {
      rules += "~" + pattern.pattern;
    } else {
      rules += (pattern.access == kReadKey ? "%R~" : "%W~") + pattern.pattern;
    }
  }
  return rules;
}

std::string User::Describe() const {
  std::string line = fmt::format("user {} {}", name_, enabled_ ? "on" : "off");
  if (nopass_) line += " nopass";
  for (const std::string& hash : hashes_) line += " #" + hash;
  const std::string keys = KeyRules();
  line += keys.empty() ? " resetkeys" : " " + keys;
  line += " resetchannels " + CommandRules();
  return line;
}

Acl::Acl(std::vector<CommandInfo> commands, std::string requirepass)
    : commands_(std::move(commands)) {
  users_.emplace("default", Finish(DefaultUser(requirepass)));
}

std::shared_ptr<const User> Acl::Finish(User user) {
  user.unrestricted_ = std::ranges::all_of(user.commands_, [](bool allowed) { return allowed; }) &&
                       user.CanAccessAll(kReadKey | kWriteKey);
  return std::make_shared<const User>(std::move(user));
}

User Acl::DefaultUser(const std::string& requirepass) const {
  User user;
  user.name_ = "default";
  std::vector<std::string> rules = {"on", "~*", "&*", "+@all"};
  rules.push_back(requirepass.empty() ? "nopass" : ">" + requirepass);
  user.commands_.assign(commands_.size(), false);
  (void)ApplyRules(user, rules);  // well-formed: cannot fail
  return user;
}

int Acl::CommandId(std::string_view name) const {
  const std::string lower = Lower(name);
  for (size_t i = 0; i < commands_.size(); ++i) {
    if (commands_[i].name == lower) return static_cast<int>(i);
  }
  return -1;
}

void Acl::Allow(User& user, uint32_t categories, bool allow) const {
  for (size_t i = 0; i < commands_.size(); ++i) {
    if ((commands_[i].categories & categories) != 0) user.commands_[i] = allow;
  }
}

Status Acl::Apply(User& user, std::string_view rule) const {
  const std::string lower = Lower(rule);
  if (lower == "on" || lower == "off") {
    user.enabled_ = lower == "on";
  } else if (lower == "nopass") {
    user.nopass_ = true;
    user.hashes_.clear();
  } else if (lower == "resetpass") {
    user.nopass_ = false;
    user.hashes_.clear();
  } else if (rule.starts_with('>') || rule.starts_with('#')) {
    const std::string hash = rule[0] == '>' ? HashPassword(rule.substr(1)) : Lower(rule.substr(1));
    if (!IsHash(hash)) {
      return InvalidArgument(
          "The password hash must be exactly 64 characters and contain only lowercase hexadecimal "
          "characters");
    }
    user.nopass_ = false;
    if (std::ranges::find(user.hashes_, hash) == user.hashes_.end()) user.hashes_.push_back(hash);
  } else if (rule.starts_with('<') || rule.starts_with('!')) {
    const std::string hash = rule[0] == '<' ? HashPassword(rule.substr(1)) : Lower(rule.substr(1));
    const auto found = std::ranges::find(user.hashes_, hash);
    if (found == user.hashes_.end()) return InvalidArgument("no such password");
    user.hashes_.erase(found);
  } else if (lower == "allkeys") {
    user.keys_ = {{"*", kReadKey | kWriteKey}};
  } else if (lower == "resetkeys") {
    user.keys_.clear();
  } else if (rule.starts_with('~') || rule.starts_with('%')) {
    uint8_t access = kReadKey | kWriteKey;
    std::string_view pattern = rule.substr(1);
    if (rule[0] == '%') {
      const size_t tilde = rule.find('~');
      access = tilde == std::string_view::npos ? 0 : PercentAccess(rule.substr(1, tilde - 1));
      if (access == 0) return InvalidArgument("Syntax error");
      pattern = rule.substr(tilde + 1);
    }
    user.keys_.push_back({std::string(pattern), access});
  } else if (lower == "allchannels" || lower == "resetchannels" || rule.starts_with('&')) {
    // Accepted for Redis's aclfiles: tally's channels are keys, which the key rules govern.
  } else if (lower == "allcommands" || lower == "+@all" || lower == "nocommands" ||
             lower == "-@all") {
    user.base_all_ = lower == "allcommands" || lower == "+@all";
    user.commands_.assign(commands_.size(), user.base_all_);
    user.command_rules_.clear();
  } else if ((rule.starts_with('+') || rule.starts_with('-')) && rule.size() > 1) {
    const bool allow = rule[0] == '+';
    if (rule[1] == '@') {
      const std::string_view name = std::string_view(lower).substr(2);
      const auto category = std::ranges::find(kCategories, name, &CategoryName::name);
      if (category == std::end(kCategories)) {
        return InvalidArgument("Unknown command or category name in ACL");
      }
      Allow(user, category->bit, allow);
    } else {
      const int id = CommandId(lower.substr(1));
      if (id < 0) return InvalidArgument("Unknown command or category name in ACL");
      user.commands_[static_cast<size_t>(id)] = allow;
    }
    user.command_rules_.push_back(lower);
  } else if (lower == "reset") {
    user.enabled_ = false;
    user.nopass_ = false;
    user.hashes_.clear();
    user.keys_.clear();
    user.base_all_ = false;
    user.commands_.assign(commands_.size(), false);
    user.command_rules_.clear();
  } else {
    return InvalidArgument("Syntax error");
  }
  return OkStatus();
}

Status Acl::ApplyRules(User& user, std::span<const std::string> rules) const {
  for (const std::string& rule : rules) {
    if (auto status = Apply(user, rule); !status) {
      return InvalidArgument(
          fmt::format("Error in ACL SETUSER modifier '{}': {}", rule, status.error().message));
    }
  }
  return OkStatus();
}

Status Acl::SetUser(std::string_view name, std::span<const std::string> rules) {
  if (name.empty() || name.find_first_of(" \t\r\n") != std::string_view::npos) {
    return InvalidArgument("Usernames can't contain spaces or null characters");
  }
  std::unique_lock lock(mutex_);
  User user;
  if (const auto found = users_.find(name); found != users_.end()) {
    user = *found->second;
  } else {
    user.name_ = std::string(name);
    user.commands_.assign(commands_.size(), false);
  }
  if (auto status = ApplyRules(user, rules); !status) return status;
  users_[std::string(name)] = Finish(std::move(user));
  version_.fetch_add(1, std::memory_order_acq_rel);
  return OkStatus();
}

Result<bool> Acl::DeleteUser(std::string_view name) {
  if (name == "default") return InvalidArgument("The 'default' user cannot be removed");
  std::unique_lock lock(mutex_);
  const auto found = users_.find(name);
  if (found == users_.end()) return false;
  users_.erase(found);
  version_.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

std::shared_ptr<const User> Acl::Find(std::string_view name) const {
  std::shared_lock lock(mutex_);
  const auto found = users_.find(name);
  return found == users_.end() ? nullptr : found->second;
}

std::vector<std::shared_ptr<const User>> Acl::Users() const {
  std::shared_lock lock(mutex_);
  std::vector<std::shared_ptr<const User>> users;
  for (const auto& [name, user] : users_) users.push_back(user);
  return users;
}

std::shared_ptr<const User> Acl::Authenticate(std::string_view name,
                                              std::string_view password) const {
  auto user = Find(name);
  return user != nullptr && user->CheckPassword(password) ? user : nullptr;
}

std::shared_ptr<const User> Acl::OpenDefault() const {
  auto user = Find("default");
  return user != nullptr && user->enabled() && user->nopass() ? user : nullptr;
}

Status Acl::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IOError(fmt::format("{}: cannot read the ACL file", path));
  std::map<std::string, std::shared_ptr<const User>, std::less<>> loaded;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::vector<std::string> words = Words(line);
    if (words.empty() || words[0].starts_with('#')) continue;
    if (words.size() < 2 || words[0] != "user") {
      return InvalidArgument(fmt::format("{}:{}: should start with user <name>", path, number));
    }
    if (loaded.contains(words[1])) {
      return InvalidArgument(fmt::format("{}:{}: duplicate user '{}'", path, number, words[1]));
    }
    User user;
    user.name_ = words[1];
    user.commands_.assign(commands_.size(), false);
    auto status = ApplyRules(user, std::span(words).subspan(2));
    if (!status) {
      return InvalidArgument(fmt::format("{}:{}: {}", path, number, status.error().message));
    }
    loaded.emplace(words[1], Finish(std::move(user)));
  }
  std::unique_lock lock(mutex_);
  if (!loaded.contains("default")) loaded.emplace("default", users_.at("default"));
  users_ = std::move(loaded);
  version_.fetch_add(1, std::memory_order_acq_rel);
  return OkStatus();
}

Status Acl::Save(const std::string& path) const {
  std::string text;
  for (const auto& user : Users()) text += user->Describe() + '\n';
  // Readable by tallyd's user only (the file holds password digests), written whole and
  // fsync'd before it replaces the old one: a crash leaves the old file or the new one.
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IOError(fmt::format("{}: cannot write the ACL file", temporary));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  const bool synced = written == text.size() && ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return IOError(fmt::format("{}: cannot write the ACL file", path));
  }
  return OkStatus();
}

bool Acl::AuthBlocked(std::string_view address, int64_t now_ms) const {
  const int64_t limit = max_auth_failures_.load(std::memory_order_relaxed);
  if (limit <= 0) return false;
  std::lock_guard lock(failures_mutex_);
  const auto found = failures_.find(address);
  return found != failures_.end() && now_ms - found->second.window_start_ms < 60000 &&
         found->second.count >= limit;
}

void Acl::AuthFailed(std::string_view address, int64_t now_ms) {
  if (max_auth_failures_.load(std::memory_order_relaxed) <= 0) return;
  std::lock_guard lock(failures_mutex_);
  // Windows past their minute go (at most once a second), so that the map holds only
  // addresses failing now; past kMaxFailingAddresses of those, new ones are not tracked: the
  // memory stays bounded however many addresses an attacker has.
  if (failures_.size() > 4096 && now_ms - last_sweep_ms_ >= 1000) {
    last_sweep_ms_ = now_ms;
    std::erase_if(failures_, [now_ms](const auto& entry) {
      return now_ms - entry.second.window_start_ms >= 60000;
    });
  }
  auto found = failures_.find(address);
  if (found == failures_.end()) {
    if (failures_.size() >= kMaxFailingAddresses) return;
    found = failures_.emplace(std::string(address), Failures{}).first;
  }
  Failures& failures = found->second;
  if (now_ms - failures.window_start_ms >= 60000) failures = Failures{now_ms, 0};
  ++failures.count;
}

void Acl::Log(AclLogEntry entry, int64_t now_ms) {
  std::lock_guard lock(log_mutex_);
  for (auto it = log_.begin(); it != log_.end(); ++it) {
    if (it->reason == entry.reason && it->context == entry.context && it->object == entry.object &&
        it->username == entry.username && now_ms - it->updated_ms < 60000) {
      AclLogEntry same = std::move(*it);
      log_.erase(it);
      ++same.count;
      same.updated_ms = now_ms;
      same.client = std::move(entry.client);
      log_.insert(log_.begin(), std::move(same));
      return;
    }
  }
  entry.id = next_log_id_++;
  entry.created_ms = entry.updated_ms = now_ms;
  log_.insert(log_.begin(), std::move(entry));
  if (log_.size() > kLogSize) log_.pop_back();
}

std::vector<AclLogEntry> Acl::LogEntries(size_t count) const {
  std::lock_guard lock(log_mutex_);
  return {log_.begin(), log_.begin() + static_cast<ptrdiff_t>(std::min(count, log_.size()))};
}

void Acl::ResetLog() {
  std::lock_guard lock(log_mutex_);
  log_.clear();
}

}  // namespace tally::auth
