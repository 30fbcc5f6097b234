#include "servers/http/worker.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

#include "servers/event_loop.h"
#include "servers/http/connection.h"
#include "servers/protected_mode.h"

namespace tally::http {

HttpWorker::HttpWorker(HttpShared& shared, int index)
    : shared_(shared),
      index_(index),
      api_(shared.services,
           ApiOptions{shared.options.password, shared.options.public_metrics, &shared.requests}),
      gate_(shared.services.engine,
            [this] { boost::asio::post(io_, [this] { ScheduleSettle(); }); }) {}

HttpWorker::~HttpWorker() { Stop(); }

void HttpWorker::Start() {
  guard_ =
      std::make_unique<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(
          io_.get_executor());
  thread_ = servers::RunEventLoop([this] { io_.run(); }, fmt::format("HTTP worker {}", index_));
}

void HttpWorker::Stop() {
  if (!thread_.joinable()) return;
  boost::asio::post(io_, [this] {
    stopping_ = true;
    gate_.Clear();
    std::vector<std::shared_ptr<HttpConnection>> all;
    all.reserve(connections_.size());
    for (const auto& [raw, connection] : connections_) all.push_back(connection);
    for (const auto& connection : all) connection->Close();
    tunnels_.CloseAll();
    guard_.reset();
  });
  thread_.join();
}

void HttpWorker::Adopt(boost::asio::ip::tcp::socket socket, servers::Peer peer, bool refuse) {
  boost::asio::post(io_, [this, refuse, peer, socket = std::move(socket)]() mutable {
    if (stopping_) {
      if (!refuse) shared_.connections.fetch_sub(1, std::memory_order_relaxed);
      return;  // the socket closes as it goes out of scope
    }
    auto connection = std::make_shared<HttpConnection>(*this, std::move(socket), !refuse, peer);
    connections_.emplace(connection.get(), connection);
    if (refuse) {
      connection->Refuse();
    } else if (servers::RefusedByProtectedMode(shared_.options.protected_mode,
                                               api_.acl().OpenDefault() != nullptr,
                                               peer.remote.address())) {
      connection->RefuseProtected();
    } else {
      connection->Start();
    }
  });
}

void HttpWorker::Forget(HttpConnection* connection) { connections_.erase(connection); }

void HttpWorker::WhenDurable(const std::shared_ptr<HttpConnection>& connection) {
  if (!stopping_ && gate_.Admit(connection)) ScheduleSettle();
}

void HttpWorker::ScheduleSettle() {
  if (settle_scheduled_) return;
  settle_scheduled_ = true;
  // Handlers already queued (the other requests of this turn) run first, so that one
  // commit serves all of them.
  boost::asio::post(io_, [this] {
    settle_scheduled_ = false;
    gate_.Settle();
  });
}

}  // namespace tally::http
