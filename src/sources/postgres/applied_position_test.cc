// AppliedPosition: a position is reported once its epoch is durable, not before and not
// later, in whichever order the stream's thread and the committer get there.
#include "sources/postgres/applied_position.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace tally::postgres {
namespace {

TEST(AppliedPosition, WaitsForTheEpochThenMovesAtOnce) {
  AppliedPosition applied;
  EXPECT_EQ(applied.position(), 0u);
  applied.Add(5, 100);
  EXPECT_EQ(applied.position(), 0u);  // epoch 5 is not durable yet
  applied.Durable(4);
  EXPECT_EQ(applied.position(), 0u);
  applied.Durable(5);
  EXPECT_EQ(applied.position(), 100u);
}

TEST(AppliedPosition, AnEpochAlreadyDurableMovesAtOnce) {
  AppliedPosition applied;
  applied.Durable(7);  // a reader made the epoch durable before the stream's thread added it
  applied.Add(7, 300);
  EXPECT_EQ(applied.position(), 300u);
  applied.Add(3, 200);  // never backwards
  EXPECT_EQ(applied.position(), 300u);
}

TEST(AppliedPosition, PositionsOfLaterEpochsWaitForTheirOwn) {
  AppliedPosition applied;
  applied.Add(5, 100);
  applied.Add(5, 150);  // two transactions in one epoch
  applied.Add(6, 200);
  applied.Add(8, 300);
  applied.Durable(5);
  EXPECT_EQ(applied.position(), 150u);
  applied.Durable(7);
  EXPECT_EQ(applied.position(), 200u);
  applied.Durable(9);
  EXPECT_EQ(applied.position(), 300u);
}

TEST(AppliedPosition, NothingWrittenWaitsBehindWhatWasWrittenBefore) {
  AppliedPosition applied;
  applied.Add(0, 50);  // nothing waits: at once
  EXPECT_EQ(applied.position(), 50u);
  applied.Add(5, 100);
  applied.Add(0, 120);  // a keepalive after the transaction: applied only with it
  EXPECT_EQ(applied.position(), 50u);
  applied.Durable(5);
  EXPECT_EQ(applied.position(), 120u);
  applied.Add(0, 130);
  EXPECT_EQ(applied.position(), 130u);
}

TEST(AppliedPosition, ConcurrentAddsAndDurablesEndAtTheLastPosition) {
  AppliedPosition applied;
  constexpr uint64_t kEpochs = 20000;
  // The committer says an epoch is durable only after `announced` holds it, so a position
  // read before `announced` is never ahead of the epochs announced so far.
  std::atomic<uint64_t> announced{0};
  std::thread committer([&] {
    for (uint64_t e = 1; e <= kEpochs; ++e) {
      announced.store(e);
      applied.Durable(e);
    }
  });
  for (uint64_t e = 1; e <= kEpochs; ++e) {
    applied.Add(e, e * 10);
    const Lsn position = applied.position();
    EXPECT_LE(position, std::min(e, announced.load()) * 10) << "epoch " << e;
  }
  committer.join();
  EXPECT_EQ(applied.position(), kEpochs * 10);
}

}  // namespace
}  // namespace tally::postgres
