#include "servers/http/worker.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

#include "servers/event_loop.h"
#include "servers/http/connection.h"

namespace tally::http {

HttpWorker::HttpWorker(HttpShared& shared, int index)
    : shared_(shared),
      index_(index),
      api_(shared.engine, shared.derived, shared.options.password, shared.options.source_report) {
  api_.set_monitoring({shared.options.metrics, shared.options.public_metrics,
                       shared.options.readiness, &shared.requests});
}

HttpWorker::~HttpWorker() { Stop(); }

void HttpWorker::Start() {
  guard_ =
      std::make_unique<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(
          io_.get_executor());
  thread_ = servers::RunEventLoop(io_, fmt::format("HTTP worker {}", index_));
}

void HttpWorker::Stop() {
  if (!thread_.joinable()) return;
  boost::asio::post(io_, [this] {
    stopping_ = true;
    waiting_.clear();
    std::vector<std::shared_ptr<HttpConnection>> all;
    all.reserve(connections_.size());
    for (const auto& [raw, connection] : connections_) all.push_back(connection);
    for (const auto& connection : all) connection->Close();
    guard_.reset();
  });
  thread_.join();
}

void HttpWorker::Adopt(boost::asio::ip::tcp::socket socket, bool refuse) {
  boost::asio::post(io_, [this, refuse, socket = std::move(socket)]() mutable {
    if (stopping_) {
      if (!refuse) shared_.connections.fetch_sub(1, std::memory_order_relaxed);
      return;  // the socket closes as it goes out of scope
    }
    auto connection = std::make_shared<HttpConnection>(*this, std::move(socket), !refuse);
    connections_.emplace(connection.get(), connection);
    if (refuse) {
      connection->Refuse();
    } else {
      connection->Start();
    }
  });
}

void HttpWorker::Forget(HttpConnection* connection) { connections_.erase(connection); }

void HttpWorker::WhenDurable(uint64_t epoch, std::function<void()> then) {
  if (shared_.engine.IsDurable(epoch)) {
    then();
    return;
  }
  waiting_.push_back(Waiting{epoch, std::move(then)});
  ScheduleRelease();
}

void HttpWorker::ScheduleRelease() {
  if (release_scheduled_) return;
  release_scheduled_ = true;
  // Handlers already queued (the other requests of this turn) run first, so that one
  // commit serves all of them.
  boost::asio::post(io_, [this] { Release(); });
}

void HttpWorker::Release() {
  release_scheduled_ = false;
  // An RMW, so that it reads (and synchronizes with) the latest OnDurable: its epoch is seen.
  durable_notice_pending_.exchange(false, std::memory_order_acq_rel);
  if (waiting_.empty() || stopping_) return;
  engine::Engine& engine = shared_.engine;
  // Commit here rather than hand off to another thread. When another thread is committing
  // (TryCommitNow returns false at once), its announcement comes after the notice flag was
  // cleared above, so it starts another turn: no waiting response can be forgotten.
  if (engine.committer().commits_on_waiting_thread()) engine.committer().TryCommitNow();
  has_waiting_.store(true, std::memory_order_relaxed);
  // Pairs with the fence in OnDurable: either the check below sees the epoch that call
  // announces, or that call sees has_waiting_ and schedules another release.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::vector<Waiting> ready;
  size_t kept = 0;
  for (auto& waiting : waiting_) {
    if (engine.IsDurable(waiting.epoch)) {
      ready.push_back(std::move(waiting));
    } else {
      waiting_[kept++] = std::move(waiting);
    }
  }
  waiting_.resize(kept);
  if (waiting_.empty()) has_waiting_.store(false, std::memory_order_relaxed);
  for (auto& waiting : ready) waiting.then();
}

void HttpWorker::OnDurable() {
  if (shared_.engine.durability() == engine::Durability::kAsync) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!has_waiting_.load(std::memory_order_relaxed)) return;
  // One notice per turn is enough: Release looks at every waiting response.
  if (durable_notice_pending_.exchange(true, std::memory_order_acq_rel)) return;
  boost::asio::post(io_, [this] { ScheduleRelease(); });
}

}  // namespace tally::http
