#include "servers/http/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <future>

#include "servers/accept.h"
#include "servers/http/worker.h"
#include "servers/listen.h"

namespace tally::http {

HttpServer::HttpServer(servers::Services services, HttpOptions options)
    // Braces, not make_unique: clang 14 (the fuzz build) has no parenthesized aggregate init.
    : shared_(new HttpShared{.services = std::move(services), .options = std::move(options)}) {
  metrics::Registry* registry = shared_->services.metrics;
  if (registry == nullptr) return;
  HttpShared* shared = shared_.get();
  registry->AddCollector(
      "tally_http_requests_total",
      "HTTP responses by route and status class (method and route empty: no route matched, "
      "or the request was malformed, too large or refused).",
      metrics::Type::kCounter,
      [shared](metrics::SampleWriter& out) { shared->requests.Collect(out); });
  registry->AddGauge("tally_http_connections", "HTTP connections open.", [shared] {
    return static_cast<double>(shared->connections.load(std::memory_order_relaxed));
  });
  registry->AddCollector("tally_http_refused_connections_total",
                         "HTTP connections refused (--http-max-connections).",
                         metrics::Type::kCounter, [shared](metrics::SampleWriter& out) {
                           out.Add(shared->refused.load(std::memory_order_relaxed));
                         });
}

HttpServer::~HttpServer() { Stop(); }

int64_t HttpServer::connections() const {
  return shared_->connections.load(std::memory_order_relaxed);
}

uint64_t HttpServer::refused_connections() const {
  return shared_->refused.load(std::memory_order_relaxed);
}

Status HttpServer::Start() {
  const HttpOptions& options = shared_->options;
  const int threads = std::max(1, options.threads);
  for (int i = 0; i < threads; ++i) {
    workers_.push_back(std::make_unique<HttpWorker>(*shared_, i));
  }
  auto& io = workers_.front()->io();
  acceptor_ = std::make_unique<boost::asio::ip::tcp::acceptor>(io);
  tls_acceptor_ = std::make_unique<boost::asio::ip::tcp::acceptor>(io);
  if (options.plain) {
    auto status = servers::Listen(*acceptor_, options.bind, options.port, "HTTP");
    if (!status) return status;
    port_ = acceptor_->local_endpoint().port();
  }
  if (options.tls_port != 0) {
    auto status = servers::Listen(*tls_acceptor_, options.bind, options.tls_port, "HTTPS");
    if (!status) return status;
    tls_port_ = tls_acceptor_->local_endpoint().port();
  }

  std::vector<servers::DurabilityGate*> gates;
  for (auto& worker : workers_) gates.push_back(&worker->gate());
  durable_.Attach(shared_->services.engine.committer(), std::move(gates));

  if (acceptor_->is_open()) Accept(*acceptor_, false);
  if (tls_acceptor_->is_open()) Accept(*tls_acceptor_, true);
  for (auto& worker : workers_) worker->Start();
  started_ = true;
  spdlog::info("serving HTTP on {}{}{} with {} thread(s)", options.bind,
               options.plain ? fmt::format(" port {}", port_) : "",
               tls_port_ != 0 ? fmt::format(" HTTPS port {}", tls_port_) : "", threads);
  return OkStatus();
}

void HttpServer::Accept(boost::asio::ip::tcp::acceptor& acceptor, bool tls) {
  servers::AcceptConnections(
      acceptor, tls ? "HTTPS" : "HTTP", workers_, next_worker_,
      [this, tls](HttpWorker& worker, boost::asio::ip::tcp::socket socket) {
        if (!tls) {
          const servers::Peer peer = servers::Peer::Of(socket);
          Admit(worker, std::move(socket), peer);
          return;
        }
        // Counted (or refused) once the handshake is done: a 503 must be readable too.
        tls::TlsContext& context = *shared_->services.tls;
        worker.tunnels().Serve(
            std::move(socket), context.Current(), tls::ClientAuth::kNo,
            [this, &worker](boost::asio::ip::tcp::socket inner, servers::Peer peer) {
              Admit(worker, std::move(inner), peer);
            });
      });
}

void HttpServer::Admit(HttpWorker& worker, boost::asio::ip::tcp::socket socket,
                       const servers::Peer& peer) {
  const bool refuse =
      shared_->connections.load(std::memory_order_relaxed) >= shared_->options.max_connections;
  if (refuse) {
    shared_->refused.fetch_add(1, std::memory_order_relaxed);
  } else {
    shared_->connections.fetch_add(1, std::memory_order_relaxed);
  }
  worker.Adopt(std::move(socket), peer, refuse);
}

void HttpServer::Stop() {
  if (!started_) return;
  started_ = false;
  durable_.Detach();
  // Close the acceptor on its own thread and wait, so that no socket is handed to a
  // worker after it stopped.
  std::promise<void> closed;
  boost::asio::post(workers_.front()->io(), [this, &closed] {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
    tls_acceptor_->close(ignored);
    closed.set_value();
  });
  closed.get_future().wait();
  for (auto& worker : workers_) worker->Stop();
  acceptor_.reset();
  tls_acceptor_.reset();
  workers_.clear();
}

}  // namespace tally::http
