// Time, behind an interface so that tests can drive expiry with a clock they control.
#pragma once

#include <atomic>
#include <cstdint>

namespace tally {

// Wall-clock milliseconds since the Unix epoch. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMillis() const = 0;
};

// The real clock (CLOCK_REALTIME). Expiry deadlines are absolute Unix times, as in Redis,
// so that EXPIREAT and deadlines that survive restarts mean the same on every node.
class SystemClock final : public Clock {
 public:
  int64_t NowMillis() const override;
  static SystemClock* Default();
};

// A clock that moves only when told to. For tests.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_millis) : now_(start_millis) {}
  int64_t NowMillis() const override { return now_.load(std::memory_order_relaxed); }
  void Advance(int64_t millis) { now_.fetch_add(millis, std::memory_order_relaxed); }
  void Set(int64_t millis) { now_.store(millis, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace tally
