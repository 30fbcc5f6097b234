// For tests: a loopback TCP port of their own, to play a server that refuses connections,
// never answers, or answers as the test says.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace tally::testing {

// A socket bound to 127.0.0.1 on a free port: connections to it are refused until Listen(),
// then they are accepted into the backlog (the handshake completes) until someone calls
// accept() on fd(). Closed when it goes.
class TestPort {
 public:
  TestPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~TestPort() { close(fd_); }
  TestPort(const TestPort&) = delete;
  TestPort& operator=(const TestPort&) = delete;

  void Listen() { listen(fd_, 8); }
  int fd() const { return fd_; }
  int port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace tally::testing
