#include "servers/epoll_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tally::servers {
namespace {

// Only at start, and only when the process is out of descriptors or memory.
int OrAbort(int fd, const char* what) {
  if (fd < 0) {
    spdlog::critical("cannot create {}: {}", what, std::strerror(errno));
    std::abort();
  }
  return fd;
}

Status CtlError(const char* what, int fd) {
  return IOError(fmt::format("epoll_ctl {} of descriptor {}: {}", what, fd, std::strerror(errno)));
}

}  // namespace

EpollLoop::EpollLoop(Dispatch dispatch, EndOfTurn end_of_turn)
    : epoll_fd_(OrAbort(::epoll_create1(EPOLL_CLOEXEC), "an epoll set")),
      wake_fd_(OrAbort(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), "an eventfd")),
      dispatch_(std::move(dispatch)),
      end_of_turn_(std::move(end_of_turn)) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeToken;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event) != 0) {
    OrAbort(-1, "the loop's wake-up");
  }
}

EpollLoop::~EpollLoop() {
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void EpollLoop::Run() {
  while (!quit_) RunTurn(std::chrono::hours(1));
}

void EpollLoop::RunTurn(std::chrono::milliseconds max_wait) {
  loop_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  int timeout = static_cast<int>(max_wait.count());
  if (again_ || local_posted_) {
    timeout = 0;
  } else if (tick_) {
    const auto until = std::chrono::ceil<std::chrono::milliseconds>(next_tick_ - Clock::now());
    timeout = static_cast<int>(std::clamp<int64_t>(until.count(), 0, timeout));
  }
  int count = ::epoll_wait(epoll_fd_, ready_.data(), static_cast<int>(ready_.size()), timeout);
  if (count < 0) count = 0;  // EINTR: a turn with nothing ready
  bool woken = false;
  for (int i = 0; i < count; ++i) {
    if (ready_[i].data.u64 == kWakeToken) {
      woken = true;
    } else {
      // A full batch leaves the rest ready: level-triggered, they are reported next turn.
      dispatch_(ready_[i].data.u64, ready_[i].events);
    }
  }
  if (woken) {
    uint64_t ignored = 0;
    (void)::read(wake_fd_, &ignored, sizeof ignored);
  }
  if (woken || local_posted_) RunPosted(woken);
  if (tick_ && Clock::now() >= next_tick_) {
    next_tick_ = Clock::now() + tick_period_;
    tick_();
  }
  again_ = end_of_turn_();
}

void EpollLoop::RunPosted(bool woken) {
  local_posted_ = false;
  {
    std::lock_guard lock(posted_mutex_);
    running_.swap(posted_);
    // The eventfd was read: the next post from another thread must write it again.
    if (woken) wake_sent_ = false;
  }
  // Work posted while this runs (from this thread) waits for the next turn, which does not
  // block: local_posted_ is set again.
  for (auto& work : running_) work();
  running_.clear();
}

void EpollLoop::Post(std::function<void()> work) {
  const bool on_loop = std::this_thread::get_id() == loop_thread_.load(std::memory_order_relaxed);
  bool wake = false;
  {
    std::lock_guard lock(posted_mutex_);
    posted_.push_back(std::move(work));
    if (!on_loop && !wake_sent_) wake = wake_sent_ = true;
  }
  if (on_loop) {
    local_posted_ = true;
  } else if (wake) {
    const uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof one);
  }
}

void EpollLoop::Every(std::chrono::milliseconds period, std::function<void()> tick) {
  tick_ = std::move(tick);
  tick_period_ = period;
  next_tick_ = Clock::now() + period;
}

Status EpollLoop::Add(int fd, uint64_t token) {
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u64 = token;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) return CtlError("ADD", fd);
  return OkStatus();
}

Status EpollLoop::Watch(int fd, uint64_t token, bool readable, bool writable) {
  epoll_event event{};
  event.events = (readable ? EPOLLIN | EPOLLRDHUP : 0u) | (writable ? EPOLLOUT : 0u);
  event.data.u64 = token;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) != 0) return CtlError("MOD", fd);
  return OkStatus();
}

}  // namespace tally::servers
