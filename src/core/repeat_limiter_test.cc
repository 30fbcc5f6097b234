#include "core/repeat_limiter.h"

#include <gtest/gtest.h>

namespace tally {
namespace {

using namespace std::chrono_literals;

TEST(RepeatLimiterTest, LetsEachTextThroughOncePerIntervalAndCountsTheRest) {
  RepeatLimiter limiter(10s);
  const RepeatLimiter::Clock::time_point t0{};
  EXPECT_EQ(limiter.Admit("Timeout", t0 + 1s), 0u);
  EXPECT_EQ(limiter.Admit("Timeout", t0 + 2s), std::nullopt);
  EXPECT_EQ(limiter.Admit("Timeout", t0 + 10s), std::nullopt);
  // Another text is its own.
  EXPECT_EQ(limiter.Admit("Missed Server Heartbeat", t0 + 10s), 0u);
  // A full interval after it was let through: through again, with the two held back.
  EXPECT_EQ(limiter.Admit("Timeout", t0 + 11s), 2u);
  EXPECT_EQ(limiter.Admit("Timeout", t0 + 12s), std::nullopt);
  EXPECT_EQ(limiter.Admit("Timeout", t0 + 30s), 1u);
  EXPECT_EQ(limiter.Admit("Timeout", t0 + 60s), 0u);
}

TEST(RepeatLimiterTest, ForgetsEveryTextPastItsBound) {
  RepeatLimiter limiter(10s, 2);
  const RepeatLimiter::Clock::time_point t0{};
  EXPECT_EQ(limiter.Admit("a", t0), 0u);
  EXPECT_EQ(limiter.Admit("b", t0), 0u);
  EXPECT_EQ(limiter.Admit("a", t0 + 1s), std::nullopt);
  EXPECT_EQ(limiter.Admit("c", t0 + 1s), 0u);  // a third text: all forgotten first
  EXPECT_EQ(limiter.Admit("a", t0 + 2s), 0u);
}

}  // namespace
}  // namespace tally
