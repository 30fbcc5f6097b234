// NatsTestCluster: nats-servers with JetStream clustered on loopback, for tests (library
// tally_cluster_testing; tests/e2e/nats_cluster.py is the same for the Python tests).
//
// Each server gets free ports (client, route, monitoring) and a store under a new temp
// dir, its log in <dir>/n<i>.log and stdio on /dev/null. Servers are named n1, n2, ...
// (what a stream's leader is reported as) and indexed from 0. Every process this starts is
// stopped by Kill() or the destructor, and killed by the kernel if the test process dies
// first (PR_SET_PDEATHSIG; so start and restart servers from the thread that lives as long
// as the test: the signal fires when the thread that forked exits). The temp dir is
// removed unless TALLY_KEEP_NATS=1. The nats-server binary is $NATS_SERVER, else
// /usr/sbin/nats-server, else nats-server on PATH.
//
// Not thread-safe: drive it from the test's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/nats_client.h"
#include "core/status.h"

namespace tally::cluster {

class NatsTestCluster {
 public:
  // Starts `servers` nats-servers clustered together and waits until every one reports
  // healthy (/healthz: JetStream has a meta leader), at most `timeout`.
  static Result<std::unique_ptr<NatsTestCluster>> Start(
      int servers = 3, std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // Kills every server still running and removes the temp dir.
  ~NatsTestCluster();
  NatsTestCluster(const NatsTestCluster&) = delete;
  NatsTestCluster& operator=(const NatsTestCluster&) = delete;

  int size() const { return static_cast<int>(servers_.size()); }
  // Client URLs of every server (nats://127.0.0.1:<port>), running or not.
  std::vector<std::string> urls() const;
  std::string url(int index) const;
  std::string name(int index) const;  // "n1" for index 0
  // The index of the server called `name`; -1 when none is.
  int IndexOf(std::string_view name) const;
  bool running(int index) const { return servers_[index].pid > 0; }
  pid_t pid(int index) const { return servers_[index].pid; }
  const std::string& dir() const { return dir_; }

  // kill -9 of one server; returns once it has exited.
  void Kill(int index);
  // Starts a killed server again with the same configuration and store; returns once it
  // accepts client connections (JetStream may still be catching up: see WaitHealthy).
  Status Restart(int index, std::chrono::milliseconds timeout = std::chrono::seconds(15));
  // Waits until the server reports healthy (/healthz).
  Status WaitHealthy(int index, std::chrono::milliseconds timeout);

  // A connection to every server (`options.servers` is filled in).
  NatsResult<std::unique_ptr<NatsConnection>> Connect(ConnectOptions options = {}) const;
  // EnsureStream, retried while the cluster's JetStream settles (a fresh meta leader may
  // answer "temporarily unavailable" or not at all), at most `timeout`.
  static NatsResult<StreamState> EnsureStream(
      NatsConnection& connection, const StreamConfig& config,
      std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  struct Server {
    std::string name;
    int client_port = 0;
    int route_port = 0;
    int monitor_port = 0;
    std::string config_path;
    std::string log_path;
    pid_t pid = -1;
  };

  explicit NatsTestCluster(std::string dir) : dir_(std::move(dir)) {}
  Status Spawn(Server& server);
  Status WriteConfig(const Server& server) const;

  std::string dir_;
  std::vector<Server> servers_;
};

}  // namespace tally::cluster
