#include "cluster/membership.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

namespace tally::cluster {
namespace {

// A heartbeat's text, one field per line, in this order:
//   tally-member 1
//   id <40 lower-case hex characters>
//   name <1-128 printable bytes, no space>
//   redis <host:port>
//   http <host:port, or nothing>
//   owned <partition,partition,... ascending, or nothing>
//   releasing <the same>
//   leaving <0 or 1>
//   seq <decimal>
constexpr std::string_view kMagic = "tally-member 1";
constexpr size_t kMaxField = 256;

std::string JoinPartitions(const std::vector<uint32_t>& partitions) {
  std::string out;
  for (const uint32_t p : partitions) {
    if (!out.empty()) out += ',';
    out += std::to_string(p);
  }
  return out;
}

bool ParseUint(std::string_view text, uint64_t* value) {
  if (text.empty() || text.size() > 20) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size();
}

bool ParsePartitions(std::string_view text, std::vector<uint32_t>* out) {
  out->clear();
  while (!text.empty()) {
    const size_t comma = text.find(',');
    uint64_t p = 0;
    if (!ParseUint(text.substr(0, comma), &p) || p >= (1u << 16)) return false;
    if (!out->empty() && p <= out->back()) return false;
    out->push_back(static_cast<uint32_t>(p));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return false;
  }
  return true;
}

bool PrintableWord(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c > ' ' && c < 127; });
}

bool IsNodeId(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

std::string EncodeMember(const MemberInfo& info) {
  return fmt::format(
      "{}\nid {}\nname {}\nredis {}\nhttp {}\nowned {}\nreleasing {}\nleaving {}\nseq {}", kMagic,
      info.node_id, info.node_name, info.redis_address, info.http_address,
      JoinPartitions(info.owned), JoinPartitions(info.releasing), info.leaving ? 1 : 0,
      info.sequence);
}

Result<MemberInfo> DecodeMember(std::string_view bytes) {
  static constexpr std::string_view kFields[] = {"id",    "name",      "redis",   "http",
                                                 "owned", "releasing", "leaving", "seq"};
  if (!bytes.starts_with(kMagic) || bytes.size() > 64 * 1024) {
    return Corruption("not a tally heartbeat");
  }
  bytes.remove_prefix(kMagic.size());
  MemberInfo info;
  for (const std::string_view name : kFields) {
    if (!bytes.starts_with('\n')) return Corruption(fmt::format("heartbeat: no field {}", name));
    bytes.remove_prefix(1);
    const size_t end = std::min(bytes.find('\n'), bytes.size());
    std::string_view line = bytes.substr(0, end);
    bytes.remove_prefix(end);
    if (!line.starts_with(name) || line.size() < name.size() + 1 || line[name.size()] != ' ') {
      return Corruption(fmt::format("heartbeat: expected field {}", name));
    }
    const std::string_view value = line.substr(name.size() + 1);
    if (value.size() > kMaxField && name != "owned" && name != "releasing") {
      return Corruption(fmt::format("heartbeat: field {} too long", name));
    }
    if (!value.empty() && !PrintableWord(value)) {
      return Corruption(fmt::format("heartbeat: field {} is not one printable word", name));
    }
    uint64_t number = 0;
    bool ok = true;
    if (name == "id") {
      ok = IsNodeId(value);
      info.node_id = value;
    } else if (name == "name") {
      ok = !value.empty();
      info.node_name = value;
    } else if (name == "redis") {
      ok = value.find(':') != std::string_view::npos;
      info.redis_address = value;
    } else if (name == "http") {
      info.http_address = value;
    } else if (name == "owned") {
      ok = ParsePartitions(value, &info.owned);
    } else if (name == "releasing") {
      ok = ParsePartitions(value, &info.releasing);
    } else if (name == "leaving") {
      ok = value == "0" || value == "1";
      info.leaving = value == "1";
    } else {
      ok = ParseUint(value, &number);
      info.sequence = number;
    }
    if (!ok) return Corruption(fmt::format("heartbeat: bad {} '{}'", name, value));
  }
  if (!bytes.empty()) return Corruption("heartbeat: trailing bytes");
  return info;
}

Result<std::unique_ptr<Membership>> Membership::Start(NatsConnection& connection,
                                                      MembershipOptions options,
                                                      Describe describe) {
  auto subscriber = PlainSubscriber::Start(connection, options.subject);
  if (!subscriber) return tl::unexpected(subscriber.error().ToError());
  std::unique_ptr<Membership> membership(
      new Membership(connection, std::move(options), std::move(describe), std::move(*subscriber)));
  Membership* self = membership.get();
  membership->thread_ = std::thread([self] { self->Run(); });
  return membership;
}

Membership::Membership(NatsConnection& connection, MembershipOptions options, Describe describe,
                       std::unique_ptr<PlainSubscriber> subscriber)
    : connection_(connection),
      options_(std::move(options)),
      describe_(std::move(describe)),
      subscriber_(std::move(subscriber)),
      // Counted from the start time in microseconds: a restarted node's beats follow its
      // earlier ones, so that the others take them at once.
      sequence_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count())) {}

Membership::~Membership() { Leave(); }

void Membership::Leave() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  Beat(/*leaving=*/true);
}

void Membership::BeatSoon() {
  std::lock_guard lock(mutex_);
  beat_soon_ = true;
}

void Membership::Beat(bool leaving) {
  MemberInfo info = describe_();
  info.leaving = leaving;
  {
    std::lock_guard lock(mutex_);
    info.sequence = ++sequence_;
    self_id_ = info.node_id;
    Member& self = members_[info.node_id];
    self.info = info;
    self.last_seen = std::chrono::steady_clock::now();
    self.self = true;
  }
  if (auto sent = connection_.PublishPlain(options_.subject, EncodeMember(info)); !sent) {
    spdlog::debug("cluster: heartbeat not sent: {}", sent.error().message);
  }
}

void Membership::Run() {
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::milliseconds(options_.heartbeat_ms);
  auto next_beat = Clock::now();
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      if (beat_soon_) {
        beat_soon_ = false;
        next_beat = Clock::now();
      }
    }
    if (Clock::now() >= next_beat) {
      Beat(/*leaving=*/false);
      next_beat = Clock::now() + period;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - Clock::now());
    auto message = subscriber_->Next(std::clamp<int64_t>(left.count(), 1, 50));
    if (!message) {
      // Disconnected: nats.c reconnects; beats go on (buffered) meanwhile.
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_; });
      continue;
    }
    if (!message->has_value()) continue;
    auto info = DecodeMember(**message);
    std::lock_guard lock(mutex_);
    if (!info) {
      ++malformed_;
      continue;
    }
    if (info->node_id == self_id_) continue;  // our own beat, heard back
    Member& member = members_[info->node_id];
    // Beats may overtake each other across a reconnect: keep the newest (a restarted node
    // counts on from its start time; after a silence, any beat is taken).
    const bool restarted = !LiveLocked(member, Clock::now());
    if (info->sequence > member.info.sequence || restarted) {
      member.info = std::move(*info);
      member.last_seen = Clock::now();
    }
  }
}

bool Membership::LiveLocked(const Member& member, std::chrono::steady_clock::time_point now) const {
  if (member.self) return true;
  if (member.info.leaving || member.info.node_id.empty()) return false;
  return now - member.last_seen < std::chrono::milliseconds(options_.timeout_ms);
}

std::vector<Member> Membership::Live() const {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  std::vector<Member> live;
  for (const auto& [id, member] : members_) {
    if (LiveLocked(member, now)) live.push_back(member);
  }
  return live;
}

std::vector<Member> Membership::All() const {
  std::lock_guard lock(mutex_);
  std::vector<Member> all;
  for (const auto& [id, member] : members_) all.push_back(member);
  return all;
}

bool Membership::IsLive(const std::string& node_id) const {
  std::lock_guard lock(mutex_);
  const auto found = members_.find(node_id);
  return found != members_.end() && LiveLocked(found->second, std::chrono::steady_clock::now());
}

uint64_t Membership::malformed() const {
  std::lock_guard lock(mutex_);
  return malformed_;
}

}  // namespace tally::cluster
