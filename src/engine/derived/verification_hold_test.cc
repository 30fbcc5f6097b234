// VerificationHold alone: one hold at a time, when it is reached, and which transactions
// wait for its release.
#include "engine/derived/verification_hold.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace tally::derived {
namespace {

TEST(VerificationHoldTest, OneHoldAtATime) {
  VerificationHold hold;
  EXPECT_FALSE(hold.state().held);
  ASSERT_TRUE(hold.Hold(1000));
  const auto second = hold.Hold(2000);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(hold.state().position, 1000);  // the first hold stands, unchanged
  hold.Release();
  EXPECT_FALSE(hold.state().held);
  ASSERT_TRUE(hold.Hold(2000));
  EXPECT_EQ(hold.state().position, 2000);
  EXPECT_FALSE(hold.state().reached);
}

TEST(VerificationHoldTest, TheStreamReachesTheHoldAtItsPositionOrPast) {
  VerificationHold hold;
  hold.MarkStreamAt(5000);  // no hold: nothing to reach
  EXPECT_FALSE(hold.state().reached);
  ASSERT_TRUE(hold.Hold(1000));
  hold.MarkStreamAt(999);
  EXPECT_FALSE(hold.state().reached);
  hold.MarkStreamAt(1000);
  EXPECT_TRUE(hold.state().reached);
  hold.Release();
  ASSERT_TRUE(hold.Hold(1000));
  hold.MarkStreamAt(1500);
  EXPECT_TRUE(hold.state().reached);
}

TEST(VerificationHoldTest, TransactionsAtOrBelowTheHoldGoOn) {
  VerificationHold hold;
  hold.WaitUntilDue(1);  // no hold
  ASSERT_TRUE(hold.Hold(1000));
  hold.WaitUntilDue(900);
  hold.WaitUntilDue(1000);
  // Neither says that everything up to 1000 is applied: the hold is not reached.
  EXPECT_FALSE(hold.state().reached);
}

TEST(VerificationHoldTest, ATransactionAboveTheHoldReachesItAndWaitsForRelease) {
  VerificationHold hold;
  ASSERT_TRUE(hold.Hold(1000));
  std::atomic<bool> returned{false};
  std::thread stream([&] {
    hold.WaitUntilDue(1001);
    returned = true;
  });
  while (!hold.state().reached) std::this_thread::yield();
  // Reached only by the waiting transaction, which goes on only once released.
  EXPECT_FALSE(returned);
  hold.Release();
  stream.join();
  EXPECT_TRUE(returned);
  EXPECT_FALSE(hold.state().held);
}

TEST(VerificationHoldTest, AHoldReplacedLetsWhatLiesBelowTheNewPositionGoOn) {
  VerificationHold hold;
  ASSERT_TRUE(hold.Hold(1000));
  std::atomic<bool> returned{false};
  std::thread stream([&] {
    hold.WaitUntilDue(1500);
    returned = true;
  });
  while (!hold.state().reached) std::this_thread::yield();
  ASSERT_TRUE(hold.Hold(2000, /*replace=*/true));  // the waiting transaction is below it
  stream.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(hold.state().position, 2000);
  EXPECT_FALSE(hold.state().reached);  // nothing shows yet that all up to 2000 is applied
  // Moved below a waiting transaction, the new hold is reached by it.
  returned = false;
  std::thread next([&] {
    hold.WaitUntilDue(2500);
    returned = true;
  });
  while (!hold.state().reached) std::this_thread::yield();
  ASSERT_TRUE(hold.Hold(2200, /*replace=*/true));
  while (!hold.state().reached) std::this_thread::yield();
  EXPECT_EQ(hold.state().position, 2200);
  EXPECT_FALSE(returned);
  hold.Release();
  next.join();
  EXPECT_TRUE(returned);
}

}  // namespace
}  // namespace tally::derived
