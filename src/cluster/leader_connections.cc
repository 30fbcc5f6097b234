#include "cluster/leader_connections.h"

#include <fmt/format.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>

namespace tally::cluster {
namespace {

constexpr size_t kMaxInfoBytes = 64 * 1024;  // an INFO line is a few hundred bytes
constexpr std::chrono::milliseconds kNameTimeout{1000};

// Closes a socket when it goes out of scope.
struct SocketCloser {
  int fd;
  ~SocketCloser() {
    if (fd >= 0) close(fd);
  }
};

Result<int> ConnectTo(const std::string& host_port, std::chrono::milliseconds timeout) {
  std::string host = host_port;
  std::string port = "4222";
  const size_t colon = host_port.rfind(':');
  const size_t bracket = host_port.rfind(']');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("cannot resolve {}: {}", host_port, gai_strerror(error)));
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  timeval limit{};
  limit.tv_sec = timeout.count() / 1000;
  limit.tv_usec = (timeout.count() % 1000) * 1000;
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // On Linux a connect gives up after the send timeout too.
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    close(fd);
  }
  return MakeError(ErrorCode::kUnavailable, fmt::format("cannot connect to {}", host_port));
}

}  // namespace

std::string UrlHostPort(std::string_view url) {
  if (const size_t scheme = url.find("://"); scheme != std::string_view::npos) {
    url.remove_prefix(scheme + 3);
  }
  if (const size_t slash = url.find('/'); slash != std::string_view::npos) {
    url = url.substr(0, slash);
  }
  if (const size_t at = url.rfind('@'); at != std::string_view::npos) url.remove_prefix(at + 1);
  return std::string(url);
}

Result<std::string> ReadServerName(const std::string& url, std::chrono::milliseconds timeout) {
  const std::string host_port = UrlHostPort(url);
  auto fd = ConnectTo(host_port, timeout);
  if (!fd) return tl::unexpected(fd.error());
  const SocketCloser closer{*fd};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  char buffer[4096];
  while (line.find("\r\n") == std::string::npos) {
    if (line.size() > kMaxInfoBytes || std::chrono::steady_clock::now() >= deadline) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("{} sent no INFO line", host_port));
    }
    const ssize_t n = recv(*fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("{} sent no INFO line", host_port));
    }
    line.append(buffer, static_cast<size_t>(n));
  }
  line.resize(line.find("\r\n"));
  constexpr std::string_view kField = "\"server_name\":\"";
  const size_t field = line.find(kField);
  if (!line.starts_with("INFO ") || field == std::string::npos) {
    return MakeError(ErrorCode::kUnavailable, fmt::format("{} did not say its name", host_port));
  }
  const size_t begin = field + kField.size();
  const size_t end = line.find('"', begin);
  if (end == std::string::npos || end == begin) {
    return MakeError(ErrorCode::kUnavailable, fmt::format("{} did not say its name", host_port));
  }
  return line.substr(begin, end - begin);
}

std::unique_ptr<LeaderConnections> LeaderConnections::Open(const ConnectOptions& options) {
  auto leaders = std::make_unique<LeaderConnections>();
  if (options.servers.size() < 2) return leaders;
  for (size_t i = 0; i < options.servers.size(); ++i) {
    const std::string& url = options.servers[i];
    auto name = ReadServerName(url, kNameTimeout);
    if (!name) {
      spdlog::info("NATS: no connection of its own to {}: {}", url, name.error().message);
      continue;
    }
    ConnectOptions pinned = options;
    std::rotate(pinned.servers.begin(), pinned.servers.begin() + static_cast<ptrdiff_t>(i),
                pinned.servers.end());
    pinned.no_randomize = true;
    pinned.name = fmt::format("{} on {}", options.name, *name);
    // Said apart from the node's own connection's lines, which the operator watches.
    pinned.on_disconnected = [url] {
      spdlog::info("NATS: the connection kept on {} is disconnected", url);
    };
    pinned.on_reconnected = [url](const std::string& to) {
      spdlog::info("NATS: the connection kept on {} reconnected to {}", url, to);
    };
    auto connection = NatsConnection::Connect(std::move(pinned));
    if (!connection) {
      spdlog::info("NATS: no connection of its own to {}: {}", url, connection.error().message);
      continue;
    }
    leaders->pinned_.push_back(Pinned{url, std::move(*name), std::move(*connection)});
  }
  return leaders;
}

NatsConnection* LeaderConnections::On(std::string_view leader) const {
  if (leader.empty()) return nullptr;
  for (const Pinned& p : pinned_) {
    if (p.name != leader) continue;
    if (UrlHostPort(p.connection->connected_url()) != UrlHostPort(p.url)) return nullptr;
    return p.connection.get();
  }
  return nullptr;
}

std::vector<std::string> LeaderConnections::names() const {
  std::vector<std::string> names;
  for (const Pinned& p : pinned_) names.push_back(p.name);
  return names;
}

}  // namespace tally::cluster
