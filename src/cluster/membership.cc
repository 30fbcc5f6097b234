#include "cluster/membership.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/thread_name.h"

namespace tally::cluster {

Result<std::unique_ptr<Membership>> Membership::Start(NatsConnection& connection,
                                                      MembershipOptions options,
                                                      Describe describe) {
  auto subscriber = PlainSubscriber::Start(connection, options.subject);
  if (!subscriber) return tl::unexpected(subscriber.error().ToError());
  std::unique_ptr<Membership> membership(
      new Membership(connection, std::move(options), std::move(describe), std::move(*subscriber)));
  Membership* self = membership.get();
  membership->thread_ = NamedThread("membership", [self] { self->Run(); });
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
