// HttpServer: tally's HTTP/JSON API (routes in routes.h). Accepts connections on its port,
// its TLS port or both (one address) and spreads them over its I/O threads (HttpWorker, one
// event loop each), which share the node's services (the engine, the derived counters...).
// An HTTPS client reaches its worker through a tunnel (tls_tunnel.h).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <vector>

#include "core/status.h"
#include "servers/durability_gate.h"
#include "servers/http/http_options.h"
#include "servers/peer.h"
#include "servers/services.h"

namespace tally::http {

struct HttpShared;
class HttpWorker;

class HttpServer {
 public:
  // What `services` points to must outlive the server (see servers/services.h).
  // REQUIRES: services.derived, and services.tls when options.tls_port is set. The server adds its
  // figures (tally_http_*) to services.metrics, when set, and serves it on GET /metrics.
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

  // The bound ports (the chosen one when options.port was 0); 0 for a port not listened
  // on. Valid after Start().
  uint16_t port() const { return port_; }
  uint16_t tls_port() const { return tls_port_; }
  // Open connections, and connections refused for max_connections so far.
  int64_t connections() const;
  uint64_t refused_connections() const;

 private:
  // Accepts the clients of `acceptor` (the TLS one when `tls`) until it is closed.
  void Accept(boost::asio::ip::tcp::acceptor& acceptor, bool tls);
  // Hands a client to `worker`: to be served, or refused when max_connections are open.
  void Admit(HttpWorker& worker, boost::asio::ip::tcp::socket socket, const servers::Peer& peer);

  std::unique_ptr<HttpShared> shared_;
  std::vector<std::unique_ptr<HttpWorker>> workers_;
  servers::DurableListener durable_;  // the committer's announcements reach the workers here
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;      // on workers_[0]'s loop
  std::unique_ptr<boost::asio::ip::tcp::acceptor> tls_acceptor_;  // idem
  size_t next_worker_ = 0;
  uint16_t port_ = 0;
  uint16_t tls_port_ = 0;
  bool started_ = false;
};

}  // namespace tally::http
