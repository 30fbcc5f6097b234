// HttpWorker: one I/O thread of the HTTP server, with its own event loop (an Asio
// io_context), its connections and its Api (so its own change decoder and JSON parser).
//
// Durability. A response that reports writes or reads values waits until the commit epoch
// it depends on is durable (sync mode): the connection's batch goes to the worker's
// DurabilityGate, which sends it at once when it is, and otherwise at the end of the turn
// (Settle: one commit on this thread serves every batch of the turn) or of a later one that
// an announcement of the committer starts.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <memory>
#include <thread>
#include <unordered_map>

#include "servers/durability_gate.h"
#include "servers/http/http_options.h"
#include "servers/http/routes.h"
#include "servers/peer.h"
#include "servers/services.h"
#include "servers/tls/tls_tunnel.h"

namespace tally::http {

class HttpConnection;

// What every worker of one server shares.
struct HttpShared {
  const servers::Services services;
  const HttpOptions options;
  std::atomic<int64_t> connections{0};  // open, counted against max_connections
  std::atomic<uint64_t> refused{0};     // refused for max_connections
  ApiRequestCounts requests{};          // every response, by route and status class
};

class HttpWorker {
 public:
  HttpWorker(HttpShared& shared, int index);
  ~HttpWorker();  // Stops (see Stop()).
  HttpWorker(const HttpWorker&) = delete;
  HttpWorker& operator=(const HttpWorker&) = delete;

  boost::asio::io_context& io() { return io_; }
  HttpShared& shared() { return shared_; }
  engine::Engine& engine() { return shared_.services.engine; }
  Api& api() { return api_; }
  servers::DurabilityGate& gate() { return gate_; }

  void Start();
  // Closes every connection, drops the responses waiting for durability and joins the
  // thread. Call once no more sockets are handed to Adopt().
  void Stop();

  // Takes an accepted socket of this worker's io_context (or a TLS tunnel's inner end), of the
  // client `peer`. With `refuse`, the connection only gets 503 and is closed (it is not
  // counted); a client refused by protected mode gets 403 (servers/protected_mode.h). Any
  // thread.
  void Adopt(boost::asio::ip::tcp::socket socket, servers::Peer peer, bool refuse);
  // The TLS tunnels of this worker's clients on the HTTPS port.
  tls::TunnelSet& tunnels() { return tunnels_; }
  void Forget(HttpConnection* connection);

  // Sends the connection's batch (ReleaseReplies) once its epoch is durable: now, when it
  // already is, else at the end of this turn or a later one. This thread.
  void WhenDurable(const std::shared_ptr<HttpConnection>& connection);

 private:
  void ScheduleSettle();

  HttpShared& shared_;
  const int index_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::thread thread_;
  Api api_;
  servers::DurabilityGate gate_;
  tls::TunnelSet tunnels_;

  // This worker's thread only.
  std::unordered_map<HttpConnection*, std::shared_ptr<HttpConnection>> connections_;
  bool settle_scheduled_ = false;
  bool stopping_ = false;
};

}  // namespace tally::http
