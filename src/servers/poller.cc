#include "servers/poller.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tally::servers {
namespace {

int NewEpollSet() {
  const int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) {
    // Only at start, and only when the process is out of descriptors or memory.
    spdlog::critical("cannot create an epoll set: {}", std::strerror(errno));
    std::abort();
  }
  return fd;
}

Status CtlError(const char* what, int fd) {
  return IOError(fmt::format("epoll_ctl {} of descriptor {}: {}", what, fd, std::strerror(errno)));
}

}  // namespace

Poller::Poller(boost::asio::io_context& io, Dispatch dispatch)
    : set_(io, NewEpollSet()), dispatch_(std::move(dispatch)) {}

Poller::~Poller() = default;

void Poller::Start() { Arm(); }

void Poller::Stop() {
  stopped_ = true;
  boost::system::error_code ignored;
  set_.cancel(ignored);
}

Status Poller::Add(int fd, uint64_t token) {
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u64 = token;
  if (::epoll_ctl(set_.native_handle(), EPOLL_CTL_ADD, fd, &event) != 0) {
    return CtlError("ADD", fd);
  }
  return OkStatus();
}

Status Poller::Watch(int fd, uint64_t token, bool readable, bool writable) {
  epoll_event event{};
  event.events = (readable ? EPOLLIN | EPOLLRDHUP : 0u) | (writable ? EPOLLOUT : 0u);
  event.data.u64 = token;
  if (::epoll_ctl(set_.native_handle(), EPOLL_CTL_MOD, fd, &event) != 0) {
    return CtlError("MOD", fd);
  }
  return OkStatus();
}

void Poller::Arm() {
  if (stopped_) return;
  set_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                  [this](const boost::system::error_code& error) {
                    if (error || stopped_) return;
                    TakeReady();
                    Arm();
                  });
}

void Poller::TakeReady() {
  const int count = ::epoll_wait(set_.native_handle(), ready_.data(),
                                 static_cast<int>(ready_.size()), /*timeout=*/0);
  // A full batch leaves the rest ready: the re-arm reports the set readable again, after the
  // loop's other handlers had their turn.
  for (int i = 0; i < count; ++i) dispatch_(ready_[i].data.u64, ready_[i].events);
}

}  // namespace tally::servers
