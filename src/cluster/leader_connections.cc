#include "cluster/leader_connections.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "core/tcp_connect.h"

namespace tally::cluster {
namespace {

constexpr size_t kMaxInfoBytes = 64 * 1024;  // an INFO line is a few hundred bytes
constexpr std::chrono::milliseconds kNameTimeout{1000};
constexpr char kDefaultPort[] = "4222";

// The port a URL names, or NATS's default when it gives none.
std::string_view PortOf(const NatsUrlAddress& address) {
  return address.port.empty() ? kDefaultPort : address.port;
}

// The server a URL names, as "host:port", to compare and to name in messages.
std::string ServerAddress(std::string_view url) {
  const NatsUrlAddress address = ParseNatsUrl(url);
  return fmt::format("{}:{}", address.host, PortOf(address));
}

// Closes a socket when it goes out of scope.
struct SocketCloser {
  int fd;
  ~SocketCloser() { close(fd); }
};

}  // namespace

Result<std::string> ReadServerName(const std::string& url, std::chrono::milliseconds timeout) {
  const NatsUrlAddress address = ParseNatsUrl(url);
  const std::string host_port = ServerAddress(url);
  auto fd = ConnectTcp(std::string(address.host), std::string(PortOf(address)), timeout, timeout);
  if (!fd) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("cannot connect to {}: {}", host_port, fd.error().message));
  }
  const SocketCloser closer{*fd};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  char buffer[4096];
  while (line.find("\r\n") == std::string::npos) {
    if (line.size() > kMaxInfoBytes || std::chrono::steady_clock::now() >= deadline) {
      return MakeError(ErrorCode::kUnavailable, fmt::format("{} sent no INFO line", host_port));
    }
    const ssize_t n = recv(closer.fd, buffer, sizeof buffer, 0);
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
    leaders->pinned_.push_back(
        Pinned{ServerAddress(url), std::move(*name), std::move(*connection)});
  }
  return leaders;
}

NatsConnection* LeaderConnections::On(std::string_view leader) const {
  if (leader.empty()) return nullptr;
  for (const Pinned& p : pinned_) {
    if (p.name != leader) continue;
    if (ServerAddress(p.connection->connected_url()) != p.address) return nullptr;
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
