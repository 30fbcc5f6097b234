// Worker: one I/O thread with its own event loop (an Asio io_context), its connections,
// and its shard of every hot counter (an IncrementBuffer).
//
// One event-loop turn: read handlers run the requests of every connection that has input;
// increments collect in the buffer. At the end of the turn the worker folds the buffer
// into the keyspace, fills the replies' holes, and sends each connection's replies as soon
// as the commit epoch they depend on is durable — at once, or when the committer announces
// the epoch (OnDurable).
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "engine/increment_buffer.h"
#include "servers/redis/server_core.h"

namespace tally::redis {

class Connection;

class Worker {
 public:
  Worker(ServerCore& core, int index);
  ~Worker();

  boost::asio::io_context& io() { return io_; }
  WorkerStats& stats() { return stats_; }
  ServerCore& core() { return core_; }
  engine::IncrementBuffer& increments() { return increments_; }

  void Start();
  // Closes every connection and stops the thread. Call after the acceptor is closed.
  void Stop();

  // Takes a freshly accepted socket (on this worker's io_context). Any thread.
  void Adopt(boost::asio::ip::tcp::socket socket);

  // The connection ran requests this turn: it gets its replies handled at the end of it.
  void Touch(const std::shared_ptr<Connection>& connection);
  void Forget(Connection* connection);

  // Folds the buffered increments into the keyspace now and fills every touched
  // connection's holes. Called at the end of each turn, and by a session that needs to see
  // the increments before its next command.
  void FoldIncrements();

  // Called by the committer thread when `epoch` is durable.
  void OnDurable(uint64_t epoch);

 private:
  void ScheduleEndOfTurn();
  void EndOfTurn();
  void StartHousekeeping();

  ServerCore& core_;
  const int index_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::thread thread_;
  WorkerStats stats_;
  engine::IncrementBuffer increments_;
  boost::asio::steady_timer housekeeping_;

  // All below: this worker's thread only.
  absl::flat_hash_map<Connection*, std::shared_ptr<Connection>> connections_;
  std::vector<std::shared_ptr<Connection>> touched_;  // ran requests in this turn
  std::vector<std::shared_ptr<Connection>> waiting_;  // replies wait for durability
  bool end_of_turn_scheduled_ = false;
  std::atomic<bool> durable_notice_pending_{false};
  // Some connection's replies wait for durability. Set by this thread before it last looks
  // at the durable epoch, read by OnDurable after the epoch moved: a worker with nothing
  // waiting is not woken for every commit.
  std::atomic<bool> has_waiting_{false};
};

}  // namespace tally::redis
