#include "servers/epoll_loop.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

namespace tally::servers {
namespace {

using std::chrono::milliseconds;

// A connected pair of sockets: `ours` is watched, `theirs` is the peer.
class EpollLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    ours_ = fds[0];
    theirs_ = fds[1];
  }
  void TearDown() override {
    if (ours_ >= 0) ::close(ours_);
    ::close(theirs_);
  }

  // Runs one turn (waiting at most 50 ms) and returns what the loop dispatched.
  std::vector<std::pair<uint64_t, uint32_t>> Turn() {
    seen_.clear();
    loop_.RunTurn(milliseconds(50));
    return seen_;
  }

  std::vector<std::pair<uint64_t, uint32_t>> seen_;
  int ends_of_turn_ = 0;
  bool want_another_turn_ = false;
  EpollLoop loop_{[this](uint64_t token, uint32_t events) { seen_.emplace_back(token, events); },
                  [this] {
                    ++ends_of_turn_;
                    return std::exchange(want_another_turn_, false);
                  }};
  int ours_ = -1;
  int theirs_ = -1;
};

TEST_F(EpollLoopTest, ReportsAReadableSocketUntilItIsDrained) {
  ASSERT_TRUE(loop_.Add(ours_, 7));
  EXPECT_TRUE(Turn().empty());
  ASSERT_EQ(::write(theirs_, "abc", 3), 3);
  auto seen = Turn();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen.front().first, 7u);
  EXPECT_NE(seen.front().second & EPOLLIN, 0u);
  // Level-triggered: still unread, so reported again on a later turn.
  EXPECT_EQ(Turn().size(), 1u);
  char buffer[8];
  ASSERT_EQ(::read(ours_, buffer, sizeof buffer), 3);
  EXPECT_TRUE(Turn().empty());
  EXPECT_EQ(ends_of_turn_, 4);  // every turn ends, whatever it found
}

TEST_F(EpollLoopTest, WatchesForRoomToWriteOnlyWhenAsked) {
  ASSERT_TRUE(loop_.Add(ours_, 9));
  ASSERT_TRUE(loop_.Watch(ours_, 9, /*readable=*/false, /*writable=*/true));
  auto seen = Turn();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen.front().second & EPOLLOUT, 0u);
  ASSERT_TRUE(loop_.Watch(ours_, 9, /*readable=*/false, /*writable=*/false));
  ASSERT_EQ(::write(theirs_, "x", 1), 1);
  EXPECT_TRUE(Turn().empty());  // neither readable nor writable is asked for
}

TEST_F(EpollLoopTest, AClosedSocketLeavesTheSet) {
  ASSERT_TRUE(loop_.Add(ours_, 3));
  ::close(ours_);
  ours_ = -1;
  ASSERT_EQ(::send(theirs_, "x", 1, MSG_NOSIGNAL), -1);  // the peer is gone
  EXPECT_TRUE(Turn().empty());
}

TEST_F(EpollLoopTest, ErrorsOfTheSetAreValues) {
  EXPECT_FALSE(loop_.Add(-1, 1));
  EXPECT_FALSE(loop_.Watch(ours_, 1, true, false));  // never added
}

TEST_F(EpollLoopTest, WorkPostedFromAnotherThreadWakesAWaitingLoopAndRunsInOrder) {
  std::vector<int> ran;
  std::thread poster([&] {
    std::this_thread::sleep_for(milliseconds(20));  // most likely while the loop waits
    for (int i = 0; i < 3; ++i) loop_.Post([&ran, i] { ran.push_back(i); });
  });
  // Bounded: a lost wake-up would leave `ran` empty after 200 turns of up to 5 s each; a
  // working one runs the work within the first turns.
  for (int turn = 0; turn < 200 && ran.size() < 3; ++turn) loop_.RunTurn(std::chrono::seconds(5));
  poster.join();
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2}));
}

TEST_F(EpollLoopTest, WorkPostedOnTheLoopRunsNextTurnWithoutWaiting) {
  int ran = 0;
  loop_.Post([&] {
    ++ran;
    loop_.Post([&] { ++ran; });  // from the loop's thread, while running posted work
  });
  const auto start = std::chrono::steady_clock::now();
  loop_.RunTurn(std::chrono::seconds(30));  // the first turn: the poster was not the loop yet
  loop_.RunTurn(std::chrono::seconds(30));  // must not wait 30 s: work is waiting
  EXPECT_EQ(ran, 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(25));
}

TEST_F(EpollLoopTest, AnEndOfTurnThatWantsAnotherGetsItAtOnce) {
  want_another_turn_ = true;
  loop_.RunTurn(milliseconds(10));  // nothing ready: waits, then wants another
  const int after_first = ends_of_turn_;
  const auto start = std::chrono::steady_clock::now();
  loop_.RunTurn(std::chrono::seconds(30));  // runs at once
  EXPECT_EQ(ends_of_turn_, after_first + 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(25));
}

TEST_F(EpollLoopTest, TheTickRunsWhenDueAndRunQuits) {
  int ticks = 0;
  loop_.Every(milliseconds(10), [&] {
    if (++ticks == 3) loop_.Quit();
  });
  loop_.Run();  // ends on the third tick
  EXPECT_EQ(ticks, 3);
}

TEST_F(EpollLoopTest, WorkNeverRunIsDestroyedWithTheLoop) {
  auto held = std::make_shared<int>(1);
  {
    EpollLoop loop([](uint64_t, uint32_t) {}, [] { return false; });
    loop.Post([held] {});
    EXPECT_EQ(held.use_count(), 2);
  }
  EXPECT_EQ(held.use_count(), 1);
}

}  // namespace
}  // namespace tally::servers
