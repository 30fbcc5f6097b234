#include "servers/redis/worker.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

#include "servers/event_loop.h"
#include "servers/redis/connection.h"

namespace tally::redis {

Worker::Worker(ServerCore& core, int index)
    : core_(core),
      index_(index),
      shard_(&core.engine().keyspace()),
      gate_(core.engine(), [this] { boost::asio::post(io_, [this] { ScheduleEndOfTurn(); }); }),
      housekeeping_(io_) {}

Worker::~Worker() { Stop(); }

void Worker::Start() {
  guard_ =
      std::make_unique<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(
          io_.get_executor());
  StartHousekeeping();
  thread_ = servers::RunEventLoop(io_, fmt::format("worker {}", index_));
}

void Worker::Stop() {
  if (!thread_.joinable()) return;
  boost::asio::post(io_, [this] {
    housekeeping_.cancel();
    shard_.FoldIncrements();
    std::vector<std::shared_ptr<Connection>> all;
    for (const auto& [raw, connection] : connections_) all.push_back(connection);
    for (const auto& connection : all) connection->Close();
    gate_.Clear();
    guard_.reset();
  });
  thread_.join();
}

void Worker::Adopt(boost::asio::ip::tcp::socket socket) {
  boost::asio::post(io_, [this, socket = std::move(socket)]() mutable {
    auto connection = std::make_shared<Connection>(*this, std::move(socket));
    connections_.emplace(connection.get(), connection);
    connection->Start();
  });
}

void Worker::Forget(Connection* connection) { connections_.erase(connection); }

void Worker::Touch(const std::shared_ptr<Connection>& connection) {
  touched_.push_back(connection);
  ScheduleEndOfTurn();
}

void Worker::ScheduleEndOfTurn() {
  if (end_of_turn_scheduled_) return;
  end_of_turn_scheduled_ = true;
  // Handlers already queued (the other ready sockets of this turn) run before this one.
  boost::asio::post(io_, [this] { EndOfTurn(); });
}

void Worker::EndOfTurn() {
  end_of_turn_scheduled_ = false;
  shard_.FoldIncrements();
  gate_.LogAsyncWrites();
  for (const auto& connection : touched_) gate_.Admit(connection);
  touched_.clear();
  gate_.Settle();
}

void Worker::StartHousekeeping() {
  housekeeping_.expires_after(std::chrono::seconds(1));
  housekeeping_.async_wait([this](const boost::system::error_code& error) {
    if (error) return;
    const int64_t timeout = core_.options().timeout_seconds;
    if (timeout > 0) {
      const int64_t now = core_.engine().keyspace().clock()->NowMillis();
      std::vector<std::shared_ptr<Connection>> idle;
      for (const auto& [raw, connection] : connections_) {
        if (now - connection->session().info().last_interaction_ms.load() > timeout * 1000) {
          idle.push_back(connection);
        }
      }
      for (const auto& connection : idle) connection->Close();
    }
    StartHousekeeping();
  });
}

}  // namespace tally::redis
