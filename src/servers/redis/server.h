// RedisServer: the Redis-protocol front of tally. Accepts connections on its port, its TLS
// port or both (one address), and spreads them over its workers (one event loop per thread),
// which share one engine. A TLS client reaches its worker through a tunnel (tls_tunnel.h).
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/status.h"
#include "servers/durability_gate.h"
#include "servers/peer.h"
#include "servers/redis/server_core.h"
#include "servers/redis/server_options.h"
#include "servers/services.h"

namespace tally::redis {

class Worker;

class RedisServer {
 public:
  // What `services` points to must outlive the server (see servers/services.h); the server
  // adds its figures (redis_metrics.h) to services.metrics, when set.
  RedisServer(servers::Services services, ServerOptions options);
  ~RedisServer();

  // Binds, listens and starts the workers. Returns once the server is accepting.
  // REQUIRES: services.tls when options.tls_port is set.
  Status Start();

  // Stops accepting, closes every connection and joins the workers. Replies that were
  // waiting for durability are dropped unsent; what they counted is committed by the
  // engine's Stop().
  void Stop();

  // On every worker, Worker::CloseWaitingClients. Returns once all did, or false when one did
  // not within `timeout`. Any thread but a worker's.
  bool CloseWaitingClients(std::chrono::milliseconds timeout);
  // On every worker, folds the increments buffered in its current turn into the keyspace:
  // once this returns, every request any worker has taken so far has written what it
  // writes. The same threads and outcome as CloseWaitingClients.
  bool FoldIncrements(std::chrono::milliseconds timeout);

  // The bound ports; 0 for a port not listened on.
  uint16_t port() const { return core_.bound_port(); }
  uint16_t tls_port() const { return tls_port_; }

 private:
  // Accepts the clients of `acceptor` (the TLS one when `tls`) until it is closed.
  void Accept(boost::asio::ip::tcp::acceptor& acceptor, bool tls);
  // Hands a client's socket (a TLS client's once its handshake is done, so that a refusal is
  // readable) to `worker`, or refuses it past maxclients.
  void Admit(Worker& worker, boost::asio::ip::tcp::socket socket, servers::Peer peer);
  void SampleOps();
  // Runs `work` on every worker's loop thread; true once all ran it (or every worker has
  // stopped: they run nothing any more, and have closed their clients), false when one did
  // not within `timeout`.
  bool OnEveryWorker(const std::function<void(Worker&)>& work, std::chrono::milliseconds timeout);

  ServerCore core_;
  std::vector<std::unique_ptr<Worker>> workers_;
  servers::DurableListener durable_;  // the committer's announcements reach the workers here
  boost::asio::io_context accept_io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::ip::tcp::acceptor tls_acceptor_;
  uint16_t tls_port_ = 0;
  std::unique_ptr<boost::asio::steady_timer> sampler_;
  std::thread accept_thread_;
  size_t next_worker_ = 0;
  std::atomic<bool> stopped_{false};  // every worker stopped (CloseWaitingClients)
  uint64_t last_commands_ = 0;
};

}  // namespace tally::redis
