// Poller: one event loop's client sockets in an epoll set of their own, level-triggered, as
// Redis keeps its clients. The loop (an Asio io_context) watches the set's descriptor as one
// more source; when it is readable, the poller takes every ready socket in one epoll_wait and
// hands each to the loop's dispatch function.
//
// Why not Asio's reactor for client sockets. Its registration is edge-triggered, so after a
// read it must try the next read at once (a speculative read) lest bytes that arrived
// meanwhile go unnoticed: at pipeline depth 1 that read always finds the socket empty, a
// third system call per request beside the read and the send. And waiting for readability
// instead re-arms the socket with an epoll_ctl every time. Level-triggered, a socket stays in
// the set as it is: a read that leaves bytes behind is reported again, a drained socket is
// not, and a request costs its read and its send only. The set's own costs (Asio's epoll_wait
// that finds it readable, its epoll_wait, Asio's re-arm) are paid once per turn, shared by
// every request of the turn.
//
// Threads: every call on the loop's thread. Errors of epoll_ctl are returned as values (the
// caller closes that client); the poller itself never throws.
#pragma once

#include <sys/epoll.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>

#include "core/status.h"

namespace tally::servers {

class Poller {
 public:
  // Called once per ready socket, with the token it was added with and epoll's event bits
  // (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP, EPOLLRDHUP). The socket may have been closed by
  // an earlier call of the same batch: the dispatcher looks the token up, and a token no
  // longer known is skipped.
  using Dispatch = std::function<void(uint64_t token, uint32_t events)>;

  Poller(boost::asio::io_context& io, Dispatch dispatch);
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Starts watching the set (once). Stop() ends it; the loop then runs out of the poller's work.
  void Start();
  void Stop();

  // Watches `fd` for reading under `token`.
  Status Add(int fd, uint64_t token);
  // Changes what `fd` is watched for: readable, writable, both or neither (a socket that
  // reads no more and has nothing to send; errors and hang-ups are reported regardless).
  // Closing a socket removes it from the set.
  Status Watch(int fd, uint64_t token, bool readable, bool writable);

 private:
  void Arm();
  void TakeReady();

  boost::asio::posix::stream_descriptor set_;  // owns the epoll descriptor
  const Dispatch dispatch_;
  std::array<epoll_event, 256> ready_{};
  bool stopped_ = false;
};

}  // namespace tally::servers
