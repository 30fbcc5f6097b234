#include "cluster/nats_test_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/test_port.h"

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(50);

// A connected loopback socket with 1 s send and receive timeouts, or -1.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval timeout{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The body of GET <path> on the monitoring port; empty when it did not answer.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return {};
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  std::string response;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    for (int reads = 0; reads < 256; ++reads) {  // 1 MiB at most
      const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      response.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : response.substr(body + 4);
}

std::string NatsServerBinary() {
  if (const char* path = std::getenv("NATS_SERVER"); path != nullptr && *path != '\0') {
    return path;
  }
  if (access("/usr/sbin/nats-server", X_OK) == 0) return "/usr/sbin/nats-server";
  return "nats-server";
}

}  // namespace

Result<std::unique_ptr<NatsTestCluster>> NatsTestCluster::Start(int servers,
                                                                std::chrono::milliseconds timeout) {
  const std::filesystem::path base =
      std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp";
  std::string dir_template = (base / "tally-nats-XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) {
    return IOError(std::string("mkdtemp: ") + std::strerror(errno));
  }
  std::unique_ptr<NatsTestCluster> cluster(new NatsTestCluster(dir_template));
  // Free ports, all distinct: each stays bound until every one is picked. Another process
  // may still take one before its server binds it (the server's start then fails and says
  // so).
  std::vector<std::unique_ptr<testing::TestPort>> ports;
  for (int i = 0; i < 3 * servers; ++i) ports.push_back(std::make_unique<testing::TestPort>());
  for (int i = 0; i < servers; ++i) {
    Server server;
    server.name = "n" + std::to_string(i + 1);
    server.client_port = ports[3 * i]->port();
    server.route_port = ports[3 * i + 1]->port();
    server.monitor_port = ports[3 * i + 2]->port();
    server.config_path = cluster->dir_ + "/" + server.name + ".conf";
    server.log_path = cluster->dir_ + "/" + server.name + ".log";
    cluster->servers_.push_back(server);
  }
  ports.clear();
  for (Server& server : cluster->servers_) {
    if (Status written = cluster->WriteConfig(server); !written)
      return tl::unexpected(written.error());
    if (Status spawned = cluster->Spawn(server); !spawned) return tl::unexpected(spawned.error());
  }
  for (int i = 0; i < servers; ++i) {
    if (Status healthy = cluster->WaitHealthy(i, timeout); !healthy) {
      return tl::unexpected(healthy.error());
    }
  }
  return cluster;
}

NatsTestCluster::~NatsTestCluster() {
  for (int i = 0; i < size(); ++i) Kill(i);
  const char* keep = std::getenv("TALLY_KEEP_NATS");
  if (keep == nullptr || std::string_view(keep) != "1") {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::vector<std::string> NatsTestCluster::urls() const {
  std::vector<std::string> result;
  for (int i = 0; i < size(); ++i) result.push_back(url(i));
  return result;
}

std::string NatsTestCluster::url(int index) const {
  return "nats://127.0.0.1:" + std::to_string(servers_[index].client_port);
}

std::string NatsTestCluster::name(int index) const { return servers_[index].name; }

int NatsTestCluster::IndexOf(std::string_view name) const {
  for (int i = 0; i < size(); ++i) {
    if (servers_[i].name == name) return i;
  }
  return -1;
}

Status NatsTestCluster::WriteConfig(const Server& server) const {
  std::ofstream out(server.config_path);
  out << "server_name: " << server.name << "\n"
      << "listen: 127.0.0.1:" << server.client_port << "\n"
      << "http: 127.0.0.1:" << server.monitor_port << "\n"
      << "jetstream {\n  store_dir: \"" << dir_ << "/" << server.name << "\"\n"
      << "  max_memory_store: 64MB\n  max_file_store: 1GB\n}\n"
      << "cluster {\n  name: tally\n  listen: 127.0.0.1:" << server.route_port << "\n  routes: [\n";
  for (const Server& peer : servers_) {
    out << "    nats-route://127.0.0.1:" << peer.route_port << "\n";
  }
  out << "  ]\n}\n";
  out.close();
  if (!out) return IOError("cannot write " + server.config_path);
  return OkStatus();
}

Status NatsTestCluster::Spawn(Server& server) {
  const std::string binary = NatsServerBinary();
  std::vector<std::string> args = {binary, "-c", server.config_path, "-l", server.log_path};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return IOError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      dup2(null_fd, 0);
      dup2(null_fd, 1);
      dup2(null_fd, 2);
    }
    execvp(argv[0], argv.data());
    _exit(127);
  }
  server.pid = pid;
  return OkStatus();
}

void NatsTestCluster::Kill(int index) {
  Server& server = servers_[index];
  if (server.pid <= 0) return;
  kill(server.pid, SIGKILL);
  int status = 0;
  while (waitpid(server.pid, &status, 0) < 0 && errno == EINTR) {
  }
  server.pid = -1;
}

Status NatsTestCluster::Restart(int index, std::chrono::milliseconds timeout) {
  Server& server = servers_[index];
  if (server.pid > 0) return OkStatus();
  if (Status spawned = Spawn(server); !spawned) return spawned;
  for (const auto deadline = Clock::now() + timeout; Clock::now() < deadline;) {
    const int fd = ConnectLoopback(server.client_port);
    if (fd >= 0) {
      close(fd);
      return OkStatus();
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  return IOError(server.name + " did not accept connections after its restart; see " +
                 server.log_path);
}

Status NatsTestCluster::WaitHealthy(int index, std::chrono::milliseconds timeout) {
  const Server& server = servers_[index];
  std::string last;
  for (const auto deadline = Clock::now() + timeout; Clock::now() < deadline;) {
    if (server.pid > 0) {
      int status = 0;
      if (waitpid(server.pid, &status, WNOHANG) == server.pid) {
        servers_[index].pid = -1;
        return IOError(server.name + " exited; see " + server.log_path);
      }
    }
    last = HttpGet(server.monitor_port, "/healthz");
    if (last.find("\"ok\"") != std::string::npos) return OkStatus();
    std::this_thread::sleep_for(kPollInterval);
  }
  return IOError(server.name + " not healthy in time (last /healthz: " + last + "); see " +
                 server.log_path);
}

NatsResult<std::unique_ptr<NatsConnection>> NatsTestCluster::Connect(ConnectOptions options) const {
  options.servers = urls();
  return NatsConnection::Connect(std::move(options));
}

NatsResult<StreamState> NatsTestCluster::EnsureStream(NatsConnection& connection,
                                                      const StreamConfig& config,
                                                      std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    auto state = connection.EnsureStream(config);
    if (state || state.error().js_code == JSStreamNameExistErr || Clock::now() >= deadline) {
      return state;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace tally::cluster
