#include "servers/http/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <future>

#include "servers/http/worker.h"

namespace tally::http {

HttpServer::HttpServer(servers::Services services, HttpOptions options)
    : shared_(std::make_unique<HttpShared>(std::move(services), std::move(options))) {
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
  accept_retry_ = std::make_unique<boost::asio::steady_timer>(io);

  boost::system::error_code error;
  const auto address = boost::asio::ip::make_address(options.bind, error);
  if (error) return InvalidArgument(fmt::format("bad HTTP bind address '{}'", options.bind));
  const boost::asio::ip::tcp::endpoint endpoint(address, options.port);
  acceptor_->open(endpoint.protocol(), error);
  if (!error) acceptor_->set_option(boost::asio::socket_base::reuse_address(true), error);
  if (!error) acceptor_->bind(endpoint, error);
  if (!error) acceptor_->listen(boost::asio::socket_base::max_listen_connections, error);
  if (error) {
    return IOError(fmt::format("cannot listen for HTTP on {}:{}: {}", options.bind, options.port,
                               error.message()));
  }
  port_ = acceptor_->local_endpoint().port();

  std::vector<servers::DurabilityGate*> gates;
  for (auto& worker : workers_) gates.push_back(&worker->gate());
  durable_.Attach(shared_->services.engine.committer(), std::move(gates));

  Accept();
  for (auto& worker : workers_) worker->Start();
  started_ = true;
  spdlog::info("serving HTTP on {}:{} with {} thread(s)", options.bind, port_, threads);
  return OkStatus();
}

void HttpServer::Accept() {
  HttpWorker& worker = *workers_[next_worker_];
  next_worker_ = (next_worker_ + 1) % workers_.size();
  acceptor_->async_accept(worker.io(), [this, &worker](const boost::system::error_code& error,
                                                       boost::asio::ip::tcp::socket socket) {
    if (error == boost::asio::error::operation_aborted) return;
    if (error) {
      // Out of file descriptors and the like: log, pause a little, keep serving.
      spdlog::warn("HTTP accept failed: {}", error.message());
      accept_retry_->expires_after(std::chrono::milliseconds(100));
      accept_retry_->async_wait([this](const boost::system::error_code& cancelled) {
        if (!cancelled) Accept();
      });
      return;
    }
    const bool refuse =
        shared_->connections.load(std::memory_order_relaxed) >= shared_->options.max_connections;
    if (refuse) {
      shared_->refused.fetch_add(1, std::memory_order_relaxed);
    } else {
      shared_->connections.fetch_add(1, std::memory_order_relaxed);
    }
    worker.Adopt(std::move(socket), refuse);
    Accept();
  });
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
    accept_retry_->cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  for (auto& worker : workers_) worker->Stop();
  accept_retry_.reset();
  acceptor_.reset();
  workers_.clear();
}

}  // namespace tally::http
