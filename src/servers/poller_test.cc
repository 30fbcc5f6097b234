#include "servers/poller.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <utility>
#include <vector>

namespace tally::servers {
namespace {

// A connected pair of sockets: `ours` is watched, `theirs` is the peer.
class PollerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    ours_ = fds[0];
    theirs_ = fds[1];
    poller_.Start();
  }
  void TearDown() override {
    poller_.Stop();
    if (ours_ >= 0) ::close(ours_);
    ::close(theirs_);
  }

  // Runs the loop's ready handlers (bounded) and returns what the poller dispatched.
  std::vector<std::pair<uint64_t, uint32_t>> Turn() {
    seen_.clear();
    io_.restart();
    io_.run_for(std::chrono::milliseconds(50));
    return seen_;
  }

  boost::asio::io_context io_;
  std::vector<std::pair<uint64_t, uint32_t>> seen_;
  Poller poller_{io_,
                 [this](uint64_t token, uint32_t events) { seen_.emplace_back(token, events); }};
  int ours_ = -1;
  int theirs_ = -1;
};

TEST_F(PollerTest, ReportsAReadableSocketUntilItIsDrained) {
  ASSERT_TRUE(poller_.Add(ours_, 7));
  EXPECT_TRUE(Turn().empty());
  ASSERT_EQ(::write(theirs_, "abc", 3), 3);
  auto seen = Turn();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().first, 7u);
  EXPECT_NE(seen.front().second & EPOLLIN, 0u);
  // Level-triggered: still unread, so reported again on a later turn.
  EXPECT_FALSE(Turn().empty());
  char buffer[8];
  ASSERT_EQ(::read(ours_, buffer, sizeof buffer), 3);
  EXPECT_TRUE(Turn().empty());
}

TEST_F(PollerTest, WatchesForRoomToWriteOnlyWhenAsked) {
  ASSERT_TRUE(poller_.Add(ours_, 9));
  ASSERT_TRUE(poller_.Watch(ours_, 9, /*readable=*/false, /*writable=*/true));
  auto seen = Turn();
  ASSERT_FALSE(seen.empty());
  EXPECT_NE(seen.front().second & EPOLLOUT, 0u);
  ASSERT_TRUE(poller_.Watch(ours_, 9, /*readable=*/false, /*writable=*/false));
  ASSERT_EQ(::write(theirs_, "x", 1), 1);
  EXPECT_TRUE(Turn().empty());  // neither readable nor writable is asked for
}

TEST_F(PollerTest, AClosedSocketLeavesTheSet) {
  ASSERT_TRUE(poller_.Add(ours_, 3));
  ::close(ours_);
  ours_ = -1;
  ASSERT_EQ(::send(theirs_, "x", 1, MSG_NOSIGNAL), -1);  // the peer is gone
  EXPECT_TRUE(Turn().empty());
}

TEST_F(PollerTest, ErrorsOfTheSetAreValues) {
  EXPECT_FALSE(poller_.Add(-1, 1));
  EXPECT_FALSE(poller_.Watch(ours_, 1, true, false));  // never added
}

}  // namespace
}  // namespace tally::servers
