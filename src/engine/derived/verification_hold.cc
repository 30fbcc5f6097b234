#include "engine/derived/verification_hold.h"

namespace tally::derived {

Status VerificationHold::Hold(int64_t position, bool replace) {
  std::lock_guard lock(mutex_);
  if (hold_.held && !replace) {
    return MakeError(ErrorCode::kUnavailable,
                     "another verification holds the sources (COUNTER.RELEASE ends it)");
  }
  hold_ = HoldState{true, position, false};
  // A transaction waiting for the hold it replaced looks again: at or below the new
  // position it goes on, above it it reaches the new hold.
  changed_.notify_all();
  return OkStatus();
}

void VerificationHold::MarkStreamAt(int64_t position) {
  std::lock_guard lock(mutex_);
  if (hold_.held && position >= hold_.position && !hold_.reached) {
    hold_.reached = true;
    changed_.notify_all();
  }
}

HoldState VerificationHold::state() const {
  std::lock_guard lock(mutex_);
  return hold_;
}

void VerificationHold::Release() {
  std::lock_guard lock(mutex_);
  hold_ = HoldState{};
  changed_.notify_all();
}

void VerificationHold::WaitUntilDue(int64_t position) {
  std::unique_lock lock(mutex_);
  while (hold_.held && position > hold_.position) {
    hold_.reached = true;
    changed_.notify_all();
    changed_.wait(lock);
  }
}

}  // namespace tally::derived
