// HttpServer: tally's HTTP/JSON API (routes in routes.h). Accepts connections on one
// address and spreads them over its I/O threads (HttpWorker, one event loop each), which
// share the node's services (the engine, the derived counters...).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <vector>

#include "core/status.h"
#include "servers/durability_gate.h"
#include "servers/http/http_options.h"
#include "servers/services.h"

namespace tally::http {

struct HttpShared;
class HttpWorker;

class HttpServer {
 public:
  // What `services` points to must outlive the server (see servers/services.h).
  // REQUIRES: services.derived. The server adds its figures (tally_http_*) to
  // services.metrics, when set, and serves it on GET /metrics.
  HttpServer(servers::Services services, HttpOptions options);
  ~HttpServer();  // Stops (see Stop()).
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the I/O threads. Returns once the server is accepting.
  Status Start();

  // Stops accepting, closes every connection and joins the threads. Responses that were
  // waiting for durability are dropped unsent; what their requests wrote is committed by
  // the engine's Stop(). Safe to call more than once.
  void Stop();

  // The bound port (the chosen one when options.port was 0). Valid after Start().
  uint16_t port() const { return port_; }
  // Open connections, and connections refused for max_connections so far.
  int64_t connections() const;
  uint64_t refused_connections() const;

 private:
  void Accept();

  std::unique_ptr<HttpShared> shared_;
  std::vector<std::unique_ptr<HttpWorker>> workers_;
  servers::DurableListener durable_;  // the committer's announcements reach the workers here
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;  // on workers_[0]'s loop
  std::unique_ptr<boost::asio::steady_timer> accept_retry_;   // idem
  size_t next_worker_ = 0;
  uint16_t port_ = 0;
  bool started_ = false;
};

}  // namespace tally::http
