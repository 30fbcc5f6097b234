#include "core/periodic_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tally {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Waits (a few seconds at most) until `count` reaches `at_least`.
bool WaitFor(const std::atomic<int>& count, int at_least) {
  const auto deadline = steady_clock::now() + std::chrono::seconds(5);
  while (count.load() < at_least) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(PeriodicThread, CallsTheCallbackEveryInterval) {
  std::atomic<int> calls = 0;
  PeriodicThread thread(milliseconds(5), [&] { ++calls; });
  EXPECT_FALSE(thread.running());
  thread.Start();
  EXPECT_TRUE(thread.running());
  EXPECT_TRUE(WaitFor(calls, 3));
  thread.Stop();
  EXPECT_FALSE(thread.running());
  const int after_stop = calls.load();
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(calls.load(), after_stop);
}

TEST(PeriodicThread, StopWakesTheThreadAtOnce) {
  std::atomic<int> calls = 0;
  PeriodicThread thread(std::chrono::hours(1), [&] { ++calls; });
  thread.Start();
  const auto begin = steady_clock::now();
  thread.Stop();
  EXPECT_LT(steady_clock::now() - begin, std::chrono::seconds(2));
  EXPECT_EQ(calls.load(), 0);  // the first call comes one interval after Start
}

TEST(PeriodicThread, StopIsIdempotentAndFineWithoutStart) {
  PeriodicThread never_started(milliseconds(5), [] {});
  never_started.Stop();
  never_started.Stop();

  PeriodicThread thread(milliseconds(5), [] {});
  thread.Start();
  thread.Start();  // a no-op while running
  thread.Stop();
  thread.Stop();
  EXPECT_FALSE(thread.running());
}

TEST(PeriodicThread, StartsAgainAfterStop) {
  std::atomic<int> calls = 0;
  PeriodicThread thread(milliseconds(2), [&] { ++calls; });
  thread.Start();
  EXPECT_TRUE(WaitFor(calls, 1));
  thread.Stop();
  const int first_run = calls.load();
  thread.Start();
  EXPECT_TRUE(WaitFor(calls, first_run + 1));
}

TEST(PeriodicThread, StopWaitsForACallInProgress) {
  std::atomic<int> entered = 0;
  std::atomic<bool> finished = false;
  PeriodicThread thread(milliseconds(1), [&] {
    ++entered;
    std::this_thread::sleep_for(milliseconds(50));
    finished = true;
  });
  thread.Start();
  ASSERT_TRUE(WaitFor(entered, 1));
  thread.Stop();
  EXPECT_TRUE(finished.load());
}

TEST(PeriodicThread, DestructorStops) {
  std::atomic<int> calls = 0;
  {
    PeriodicThread thread(milliseconds(1), [&] { ++calls; });
    thread.Start();
    EXPECT_TRUE(WaitFor(calls, 1));
  }
  const int after = calls.load();
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(calls.load(), after);
}

TEST(PeriodicThread, ConcurrentStopsJoinOnce) {
  PeriodicThread thread(milliseconds(1), [] {});
  thread.Start();
  std::thread a([&] { thread.Stop(); });
  std::thread b([&] { thread.Stop(); });
  a.join();
  b.join();
  EXPECT_FALSE(thread.running());
}

}  // namespace
}  // namespace tally
