#include "core/repeat_limiter.h"

namespace tally {

std::optional<uint64_t> RepeatLimiter::Admit(const std::string& text, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  auto found = seen_.find(text);
  if (found == seen_.end()) {
    if (seen_.size() >= max_texts_) seen_.clear();
    seen_.emplace(text, Seen{now, 0});
    return 0;
  }
  Seen& seen = found->second;
  if (now - seen.let_through < interval_) {
    ++seen.held_back;
    return std::nullopt;
  }
  const uint64_t held_back = seen.held_back;
  seen = Seen{now, 0};
  return held_back;
}

}  // namespace tally
