// EpollLoop: the event loop of a Redis worker thread, on an epoll set of its own. The
// clients' sockets are in the set level-triggered, as Redis keeps its clients; work from
// other threads arrives through a queue and an eventfd in the same set; a periodic tick
// (housekeeping) is the wait's timeout. One turn is one epoll_wait.
//
// Why not Asio's reactor. Its registration is edge-triggered, so after a read it must try
// the next read at once (a speculative read) lest bytes that arrived meanwhile go unnoticed:
// at pipeline depth 1 that read always finds the socket empty, a third system call per
// request beside the read and the send. Level-triggered, a socket stays in the set as it
// is: a read that leaves bytes behind is reported again, a drained socket is not, and a
// request costs its read and its send only. A set of our own watched by Asio's loop still
// cost three calls a turn (Asio's epoll_wait, the set's, Asio's re-arm); running the loop
// ourselves, a turn costs its one epoll_wait, as Redis's does. Asio stays where it serves:
// TLS tunnels and the accepted sockets before they are adopted run on an io_context of
// their own (see redis/worker.h).
//
// Threads: Post() from any thread; everything else on the loop's thread (the one in Run(),
// or the test's). Errors of epoll_ctl are returned as values (the caller closes that
// client); the loop itself never throws.
#pragma once

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"

namespace tally::servers {

class EpollLoop {
 public:
  // Called once per ready socket, with the token it was added with and epoll's event bits
  // (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP, EPOLLRDHUP). The socket may have been closed by
  // an earlier call of the same batch: the dispatcher looks the token up, and a token no
  // longer known is skipped.
  using Dispatch = std::function<void(uint64_t token, uint32_t events)>;
  // Called at the end of every turn, after its sockets and posted work; returns whether it
  // wants another turn at once (the next wait does not block).
  using EndOfTurn = std::function<bool()>;

  EpollLoop(Dispatch dispatch, EndOfTurn end_of_turn);
  ~EpollLoop();
  EpollLoop(const EpollLoop&) = delete;
  EpollLoop& operator=(const EpollLoop&) = delete;

  // Runs turns on the calling thread until Quit().
  void Run();
  // One turn: waits up to `max_wait` (less when the tick is due sooner, not at all when the
  // last turn wanted another) for sockets and posted work, handles them, runs the tick when
  // due, then the end of the turn.
  void RunTurn(std::chrono::milliseconds max_wait);
  // Run() returns after the current turn.
  void Quit() { quit_ = true; }

  // Any thread: `work` runs on the loop's thread, in the order posted, during a later turn
  // (the current one, when posted from the loop's own thread: no wake-up needed). Work
  // still queued when the loop is destroyed is destroyed without running.
  void Post(std::function<void()> work);

  // `tick` runs every `period` from now on, on the loop's thread. One tick per loop.
  void Every(std::chrono::milliseconds period, std::function<void()> tick);

  // Watches `fd` for reading under `token` (any value but kWakeToken).
  Status Add(int fd, uint64_t token);
  // Changes what `fd` is watched for: readable, writable, both or neither (a socket that
  // reads no more and has nothing to send; errors and hang-ups are reported regardless).
  // Closing a socket removes it from the set.
  Status Watch(int fd, uint64_t token, bool readable, bool writable);

  static constexpr uint64_t kWakeToken = UINT64_MAX;

 private:
  using Clock = std::chrono::steady_clock;
  // Runs the posted work; `woken`: this turn read the eventfd.
  void RunPosted(bool woken);

  const int epoll_fd_;
  const int wake_fd_;  // eventfd: readable while posted work waits
  const Dispatch dispatch_;
  const EndOfTurn end_of_turn_;
  std::array<epoll_event, 256> ready_{};
  bool quit_ = false;
  bool again_ = false;                          // the last turn wanted another at once
  std::atomic<std::thread::id> loop_thread_{};  // set by RunTurn; read by Post
  bool local_posted_ = false;  // loop thread: work posted from the loop's own thread waits

  std::function<void()> tick_;
  Clock::duration tick_period_{};
  Clock::time_point next_tick_{};

  std::mutex posted_mutex_;
  std::vector<std::function<void()>> posted_;   // guarded by posted_mutex_
  bool wake_sent_ = false;                      // guarded: wake_fd_ was written since the last read
  std::vector<std::function<void()>> running_;  // loop thread: the batch being run
};

}  // namespace tally::servers
