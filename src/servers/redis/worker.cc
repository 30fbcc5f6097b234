#include "servers/redis/worker.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "servers/event_loop.h"
#include "servers/protected_mode.h"
#include "servers/redis/connection.h"

namespace tally::redis {

Worker::Worker(ServerCore& core, int index)
    : core_(core),
      index_(index),
      loop_([this](uint64_t id, uint32_t events) { OnSocketReady(id, events); },
            [this] { return EndOfTurn(); }),
      shard_(&core.engine().keyspace()),
      gate_(core.engine(), [this] { loop_.Post([this] { ScheduleEndOfTurn(); }); }) {}

Worker::~Worker() { Stop(); }

void Worker::Start() {
  guard_ =
      std::make_unique<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(
          io_.get_executor());
  io_thread_ = servers::RunEventLoop([this] { io_.run(); }, fmt::format("worker {} TLS", index_));
  loop_.Every(std::chrono::seconds(1), [this] { Housekeeping(); });
  thread_ = servers::RunEventLoop([this] { loop_.Run(); }, fmt::format("worker {}", index_));
}

void Worker::Stop() {
  if (!thread_.joinable()) return;
  // The tunnels first: none adopts a connection afterwards.
  boost::asio::post(io_, [this] {
    tunnels_.CloseAll();
    guard_.reset();
  });
  io_thread_.join();
  loop_.Post([this] {
    shard_.FoldIncrements();
    std::vector<std::shared_ptr<Connection>> all;
    for (const auto& [raw, connection] : connections_) all.push_back(connection);
    for (const auto& connection : all) connection->Close();
    gate_.Clear();
    loop_.Quit();
  });
  thread_.join();
}

void Worker::Adopt(boost::asio::ip::tcp::socket socket, servers::Peer peer) {
  // Shared, so that the work is copyable (a std::function); a socket whose work never ran
  // (the worker stopped) is closed with it.
  auto held = std::make_shared<boost::asio::ip::tcp::socket>(std::move(socket));
  loop_.Post([this, held, peer] {
    boost::asio::ip::tcp::socket socket = std::move(*held);
    if (servers::RefusedByProtectedMode(core_.options().protected_mode,
                                        core_.acl().OpenDefault() != nullptr,
                                        peer.remote.address())) {
      // As Redis: the explanation as an error reply, then the connection is closed.
      const std::string reply = fmt::format("-{}\r\n", servers::kProtectedModeMessage);
      boost::system::error_code ignored;
      boost::asio::write(socket, boost::asio::buffer(reply), ignored);
      socket.close(ignored);
      return;
    }
    auto connection = std::make_shared<Connection>(*this, std::move(socket), peer);
    connections_.emplace(connection->id(), connection);
    connection->Start();
  });
}

void Worker::Forget(uint64_t id) { connections_.erase(id); }

void Worker::CloseWaitingClients() {
  // Folded first: an increment run in this turn raises its connection's epoch here.
  shard_.FoldIncrements();
  std::vector<std::shared_ptr<Connection>> waiting;
  for (const auto& [id, connection] : connections_) {
    if (!core_.engine().IsDurable(connection->required_epoch())) waiting.push_back(connection);
  }
  for (const auto& connection : waiting) connection->Close();
  if (!waiting.empty()) {
    spdlog::warn(
        "worker {}: closed {} client(s) whose replies waited for a lost partition's "
        "commit",
        index_, waiting.size());
  }
}

void Worker::OnSocketReady(uint64_t id, uint32_t events) {
  const auto found = connections_.find(id);
  // Closed by an earlier socket of the same batch.
  if (found == connections_.end()) return;
  // Held for the call: the connection may close (and be forgotten) while it runs.
  const std::shared_ptr<Connection> connection = found->second;
  connection->OnReady(events);
}

void Worker::Touch(const std::shared_ptr<Connection>& connection) {
  touched_.push_back(connection);
  ScheduleEndOfTurn();
}

bool Worker::EndOfTurn() {
  if (!end_of_turn_scheduled_) return false;
  end_of_turn_scheduled_ = false;
  shard_.FoldIncrements();
  gate_.LogAsyncWrites();
  for (const auto& connection : touched_) gate_.Admit(connection);
  touched_.clear();
  gate_.Settle();
  // Settling may have asked for another end of turn (replies sent, a commit announced on
  // this thread): run it before waiting.
  return end_of_turn_scheduled_;
}

void Worker::Housekeeping() {
  const int64_t timeout = core_.options().timeout_seconds;
  const int64_t request_timeout = core_.options().request_timeout_seconds;
  const int64_t now = core_.engine().keyspace().clock()->NowMillis();
  std::vector<std::shared_ptr<Connection>> idle;
  std::vector<std::shared_ptr<Connection>> slow;
  for (const auto& [raw, connection] : connections_) {
    const int64_t since = connection->partial_request_since_ms();
    if (request_timeout > 0 && since != 0 && now - since > request_timeout * 1000) {
      slow.push_back(connection);
    } else if (timeout > 0 &&
               now - connection->session().info().last_interaction_ms.load() > timeout * 1000) {
      idle.push_back(connection);
    }
  }
  for (const auto& connection : idle) connection->Close();
  for (const auto& connection : slow) connection->TimeOutRequest(request_timeout);
}

}  // namespace tally::redis
