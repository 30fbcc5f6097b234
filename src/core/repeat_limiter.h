// RepeatLimiter: lets a message that repeats through once per interval, and says how many
// times it came meanwhile — for log lines that may come by the thousand, such as a NATS
// consumer's missed heartbeats while JetStream is away (ClusterNode logs the connection's
// asynchronous errors through one).
//
// Thread-safety: Admit may be called from any thread (one internal mutex).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace tally {

class RepeatLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // `max_texts`: how many different messages are remembered; past it, all are forgotten
  // (each is let through again), so that varied texts cannot grow the memory.
  explicit RepeatLimiter(Clock::duration interval, size_t max_texts = 64)
      : interval_(interval), max_texts_(max_texts) {}

  // nullopt when `text` was let through less than the interval before `now` (it is counted);
  // else the number of times it was held back since it was last let through (0 the first
  // time).
  std::optional<uint64_t> Admit(const std::string& text, Clock::time_point now = Clock::now());

 private:
  struct Seen {
    Clock::time_point let_through;
    uint64_t held_back = 0;
  };

  const Clock::duration interval_;
  const size_t max_texts_;
  std::mutex mutex_;
  std::unordered_map<std::string, Seen> seen_;  // guarded by mutex_
};

}  // namespace tally
