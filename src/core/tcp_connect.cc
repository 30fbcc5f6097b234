#include "core/tcp_connect.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace tally {
namespace {

// Connects one socket to `ai` within `timeout`, then makes it blocking with `io_timeout` on
// every read and write. The socket, or why not.
Result<int> ConnectSocket(const addrinfo& ai, std::chrono::milliseconds timeout,
                          std::chrono::milliseconds io_timeout) {
  const int fd = socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) return IOError(std::strerror(errno));
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = connect(fd, ai.ai_addr, ai.ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = poll(&p, 1, static_cast<int>(timeout.count()));
    if (rc == 0) {
      close(fd);
      return IOError("timed out");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
    errno = err;
  }
  if (rc != 0) {
    const int err = errno;
    close(fd);
    return IOError(std::strerror(err));
  }
  fcntl(fd, F_SETFL, flags);
  timeval tv{};
  tv.tv_sec = io_timeout.count() / 1000;
  tv.tv_usec = (io_timeout.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

Result<int> ConnectTcp(const std::string& host, const std::string& port,
                       std::chrono::milliseconds timeout, std::chrono::milliseconds io_timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("cannot resolve {}: {}", host, gai_strerror(rc)));
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  std::string last_error = "no address";
  for (const addrinfo* ai = addresses.get(); ai != nullptr; ai = ai->ai_next) {
    auto fd = ConnectSocket(*ai, timeout, io_timeout);
    if (fd) return *fd;
    last_error = fd.error().message;
  }
  return MakeError(ErrorCode::kUnavailable, last_error);
}

}  // namespace tally
