#include "sources/postgres/applied_position.h"

#include <algorithm>

namespace tally::postgres {

void AppliedPosition::Add(uint64_t epoch, Lsn position) {
  std::lock_guard lock(mutex_);
  // Behind the last waiting position: its epoch is written before this one is processed.
  if (!waiting_.empty()) epoch = std::max(epoch, waiting_.back().first);
  if (epoch <= durable_) {
    position_ = std::max(position_, position);
    return;
  }
  if (!waiting_.empty() && waiting_.back().first == epoch) {
    waiting_.back().second = std::max(waiting_.back().second, position);
  } else {
    waiting_.emplace_back(epoch, position);
  }
}

void AppliedPosition::Durable(uint64_t epoch) {
  std::lock_guard lock(mutex_);
  durable_ = std::max(durable_, epoch);
  Advance();
}

void AppliedPosition::Advance() {
  while (!waiting_.empty() && waiting_.front().first <= durable_) {
    position_ = std::max(position_, waiting_.front().second);
    waiting_.pop_front();
  }
}

Lsn AppliedPosition::position() const {
  std::lock_guard lock(mutex_);
  return position_;
}

}  // namespace tally::postgres
