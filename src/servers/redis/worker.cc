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
      stats_(AllCommands().size()),
      increments_(&core.engine().keyspace()),
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
    FoldIncrements();
    std::vector<std::shared_ptr<Connection>> all;
    for (const auto& [raw, connection] : connections_) all.push_back(connection);
    for (const auto& connection : all) connection->Close();
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

void Worker::FoldIncrements() {
  if (increments_.empty()) return;
  const uint64_t epoch = increments_.Publish();
  for (const auto& connection : touched_) connection->session().FillHoles(increments_, epoch);
  WorkerStats::Bump(stats_.folds);
  WorkerStats::Bump(stats_.increments_folded, increments_.size());
  increments_.Clear();
}

void Worker::EndOfTurn() {
  end_of_turn_scheduled_ = false;
  durable_notice_pending_.store(false, std::memory_order_relaxed);
  FoldIncrements();
  engine::Engine& engine = core_.engine();
  if (engine.durability() == engine::Durability::kAsync) {
    engine.committer().CommitWrittenInline();
  }
  for (const auto& connection : touched_) {
    if (connection->closed() || connection->waiting_for_durability()) continue;
    if (engine.IsDurable(connection->session().required_epoch())) {
      connection->ReleaseOutput();
    } else {
      connection->set_waiting_for_durability(true);
      waiting_.push_back(connection);
    }
  }
  touched_.clear();
  if (waiting_.empty()) return;
  if (engine.committer().commits_on_waiting_thread()) {
    // Commit here rather than hand off to another thread: with one core that is two
    // context switches saved per commit, as in Redis's fsync before replying. Our own
    // announcement is not needed (we look at every waiting connection right below).
    durable_notice_pending_.store(true, std::memory_order_relaxed);
    core_.engine().committer().TryCommitNow();
    durable_notice_pending_.store(false, std::memory_order_relaxed);
  }
  has_waiting_.store(true, std::memory_order_relaxed);
  // Pairs with the fence in OnDurable: either this reads the epoch that call announces, or
  // that call sees has_waiting_ and starts another turn.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  size_t kept = 0;
  for (auto& connection : waiting_) {
    if (connection->closed()) continue;
    if (engine.IsDurable(connection->session().required_epoch())) {
      connection->set_waiting_for_durability(false);
      connection->ReleaseOutput();
    } else {
      waiting_[kept++] = std::move(connection);
    }
  }
  waiting_.resize(kept);
  if (waiting_.empty()) has_waiting_.store(false, std::memory_order_relaxed);
}

void Worker::OnDurable(uint64_t epoch) {
  // In async mode no reply waits for durability.
  if (core_.engine().durability() == engine::Durability::kAsync) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!has_waiting_.load(std::memory_order_relaxed)) return;
  // One notice per turn is enough: EndOfTurn looks at every waiting connection.
  if (durable_notice_pending_.exchange(true, std::memory_order_acq_rel)) return;
  boost::asio::post(io_, [this] { ScheduleEndOfTurn(); });
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
