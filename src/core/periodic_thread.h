// PeriodicThread: runs a callback every interval on a thread of its own, until stopped.
// The background chores (hot-key windows, subscription flushes, retention sweeps) share
// it, so that each stops the same way: at once, without waiting out its interval.
//
//   PeriodicThread ticker(std::chrono::seconds(1), [this] { Tick(); }, "hot keys");
//   ticker.Start();
//   ...
//   ticker.Stop();  // or let the destructor do it
//
// The first call comes one interval after Start(); a call that takes longer than the
// interval delays the next one rather than piling calls up (the wait starts when a call
// returns). Stop() wakes the thread, waits for a call in progress to return and joins.
//
// Thread-safety: Start and Stop from any thread, even concurrently, but never from the
// callback itself (Stop would join the thread it runs on).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "core/thread_name.h"

namespace tally {

class PeriodicThread {
 public:
  // `name` names the thread (core/thread_name.h). REQUIRES: interval > 0; `callback` does
  // not throw.
  PeriodicThread(std::chrono::milliseconds interval, std::function<void()> callback,
                 std::string name = "periodic")
      : interval_(interval), callback_(std::move(callback)), name_(std::move(name)) {}
  ~PeriodicThread() { Stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Starts the thread. A no-op while it runs; after Stop() it starts again.
  void Start() {
    std::lock_guard control(control_mutex_);
    if (thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stopping_ = false;
    }
    thread_ = NamedThread(name_, [this] { Run(); });
  }

  // Wakes the thread, lets a call in progress finish and joins. Idempotent; a no-op if
  // the thread never started.
  void Stop() {
    std::lock_guard control(control_mutex_);
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  bool running() const {
    std::lock_guard control(control_mutex_);
    return thread_.joinable();
  }

 private:
  void Run() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
      lock.unlock();
      callback_();
      lock.lock();
    }
  }

  const std::chrono::milliseconds interval_;
  const std::function<void()> callback_;
  const std::string name_;

  mutable std::mutex control_mutex_;  // serializes Start and Stop; guards thread_
  std::thread thread_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
};

}  // namespace tally
