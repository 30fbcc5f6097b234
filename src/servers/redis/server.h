// RedisServer: the Redis-protocol front of tally. Accepts connections on one address and
// spreads them over its workers (one event loop per thread), which share one engine.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "core/metrics.h"
#include "core/status.h"
#include "engine/engine.h"
#include "servers/redis/server_core.h"
#include "servers/redis/server_options.h"

namespace tally::redis {

class Worker;

class RedisServer {
 public:
  // `engine` must be started and outlive the server; so must `derived`, which may be null
  // (no COUNTER.* commands then).
  RedisServer(engine::Engine& engine, ServerOptions options,
              derived::DerivedCounters* derived = nullptr);
  ~RedisServer();

  // Binds, listens and starts the workers. Returns once the server is accepting.
  Status Start();

  // Stops accepting, closes every connection and joins the workers. Replies that were
  // waiting for durability are dropped unsent; what they counted is committed by the
  // engine's Stop().
  void Stop();

  uint16_t port() const { return core_.bound_port(); }

  // SUBSCRIBE and PSUBSCRIBE follow counters through `hub`, which must outlive the server
  // (without one they are refused). REQUIRES: before Start().
  void set_subscriptions(engine::SubscriptionHub* hub) { core_.set_subscriptions(hub); }

  // Adds the server's figures to `registry` (redis_metrics.h). The server must outlive the
  // registry's last Render(). REQUIRES: before Start().
  void RegisterMetrics(metrics::Registry& registry);

  // INFO's "# Source" section (the PostgreSQL source's figures). REQUIRES: before Start().
  void set_source_report(StatusReporter reporter) { core_.set_source_report(std::move(reporter)); }

 private:
  void Accept();
  void SampleOps();

  ServerCore core_;
  std::vector<std::unique_ptr<Worker>> workers_;
  boost::asio::io_context accept_io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::unique_ptr<boost::asio::steady_timer> sampler_;
  std::unique_ptr<boost::asio::steady_timer> accept_retry_;
  std::thread accept_thread_;
  size_t next_worker_ = 0;
  uint64_t last_commands_ = 0;
};

}  // namespace tally::redis
