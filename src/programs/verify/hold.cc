#include "programs/verify/hold.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <thread>
#include <utility>

namespace tally::verify {

bool HoldReport::HeldAt(Lsn lsn) const {
  auto parsed = ParseLsn(position);
  return held && parsed && *parsed == lsn;
}

bool HoldReport::AppliedPast(Lsn lsn) const {
  auto parsed = ParseLsn(applied);
  return !parsed || *parsed > lsn;
}

Result<HoldReport> ReadHold(RespClient& tally) {
  auto reply = tally.Check({"COUNTER.HOLD"});
  if (!reply) return tl::unexpected(reply.error());
  if (reply->kind != Reply::Kind::kArray || reply->items.size() != 4) {
    return InvalidArgument("tallyd: COUNTER.HOLD answered " + reply->Describe());
  }
  return HoldReport{reply->items[0].AsInteger().value_or(0) != 0, reply->items[1].text,
                    reply->items[2].AsInteger().value_or(0) != 0, reply->items[3].text};
}

Hold::Hold(std::string server, Credentials credentials)
    : server_(std::move(server)), credentials_(std::move(credentials)) {}

Status Hold::Set(RespClient& tally, Lsn lsn) {
  std::lock_guard lock(mutex_);
  auto reply = tally.Call({"COUNTER.HOLD", FormatLsn(lsn)});
  if (!reply) return tl::unexpected(reply.error());
  if (reply->is_error()) {
    return InvalidArgument("tallyd: COUNTER.HOLD " + FormatLsn(lsn) + ": " + reply->text);
  }
  ours_ = true;
  return OkStatus();
}

Status Hold::Move(RespClient& tally, Lsn lsn) {
  std::lock_guard lock(mutex_);
  auto reply = tally.Call({"COUNTER.HOLD", FormatLsn(lsn), "REPLACE"});
  if (!reply) return tl::unexpected(reply.error());  // ours_ stays: Release tries again
  if (reply->is_error()) {
    return InvalidArgument("tallyd: COUNTER.HOLD " + FormatLsn(lsn) + " REPLACE: " + reply->text);
  }
  return OkStatus();
}

Status Hold::Release(RespClient* tally) {
  std::lock_guard lock(mutex_);
  if (!ours_) return OkStatus();
  if (tally != nullptr) {
    if (tally->Check({"COUNTER.RELEASE"})) {
      ours_ = false;
      return OkStatus();
    }
    // The main connection broke (or tallyd refused): once more on a new one.
  }
  if (auto released = ReleaseOnFreshConnection(); !released) return released;
  ours_ = false;
  return OkStatus();
}

Status Hold::ReleaseOnFreshConnection() {
  RespClient client;
  if (auto s = client.Connect(server_, credentials_, std::chrono::milliseconds(3000),
                              std::chrono::milliseconds(3000));
      !s) {
    return s;
  }
  auto reply = client.Check({"COUNTER.RELEASE"});
  if (!reply) return tl::unexpected(reply.error());
  return OkStatus();
}

void Hold::ReleaseOnSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([this, set] { TakeSignals(set); }).detach();
}

void Hold::TakeSignals(sigset_t set) {
  int sig = 0;
  if (sigwait(&set, &sig) != 0) return;
  std::string note;
  // Held until the process exits: the main thread, which may be about to move the hold
  // (Move sends COUNTER.HOLD anew), must not set one after it is released here.
  mutex_.lock();
  if (ours_) {
    if (auto released = ReleaseOnFreshConnection(); released) {
      ours_ = false;
      note = "; the hold was released";
    } else {
      note = "; releasing the hold failed: " + released.error().message + " (send COUNTER.RELEASE)";
    }
  }
  std::fflush(stdout);
  fmt::print(stderr, "\ntally verify: interrupted by {}{}\n",
             sig == SIGINT    ? "SIGINT"
             : sig == SIGTERM ? "SIGTERM"
                              : "SIGHUP",
             note);
  std::fflush(stderr);
  _exit(2);
}

}  // namespace tally::verify
