// RedisServer: the Redis-protocol front of tally. Accepts connections on one address and
// spreads them over its workers (one event loop per thread), which share one engine.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "core/status.h"
#include "servers/durability_gate.h"
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
  Status Start();

  // Stops accepting, closes every connection and joins the workers. Replies that were
  // waiting for durability are dropped unsent; what they counted is committed by the
  // engine's Stop().
  void Stop();

  uint16_t port() const { return core_.bound_port(); }

 private:
  void Accept();
  void SampleOps();

  ServerCore core_;
  std::vector<std::unique_ptr<Worker>> workers_;
  servers::DurableListener durable_;  // the committer's announcements reach the workers here
  boost::asio::io_context accept_io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::unique_ptr<boost::asio::steady_timer> sampler_;
  std::unique_ptr<boost::asio::steady_timer> accept_retry_;
  std::thread accept_thread_;
  size_t next_worker_ = 0;
  uint64_t last_commands_ = 0;
};

}  // namespace tally::redis
