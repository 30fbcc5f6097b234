// Worker: one I/O thread with its own event loop (servers::EpollLoop: the clients' sockets
// level-triggered, posted work, the housekeeping tick), its connections, and its WorkerShard
// (its stats and its shard of every hot counter). Beside it, an Asio io_context on a second
// thread of the worker's serves what Asio does well here: the TLS tunnels of its clients, and
// the accepted sockets until the worker adopts them (servers/accept.h accepts onto io()).
//
// One event-loop turn: read handlers run the requests of every connection that has input;
// increments collect in the shard. At the end of the turn the worker folds the shard into the
// keyspace (which fills the replies' holes) and hands each connection that ran requests to
// its DurabilityGate, which sends the connection's replies once the commit epoch they depend
// on is durable: at once, or at the end of a later turn that an announcement of the committer
// starts.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "servers/durability_gate.h"
#include "servers/epoll_loop.h"
#include "servers/peer.h"
#include "servers/redis/server_core.h"
#include "servers/redis/worker_shard.h"
#include "servers/tls/tls_tunnel.h"

namespace tally::redis {

class Connection;

class Worker {
 public:
  Worker(ServerCore& core, int index);
  ~Worker();

  // The Asio side: accepted sockets and TLS tunnels (see the class comment).
  boost::asio::io_context& io() { return io_; }
  WorkerStats& stats() { return shard_.stats(); }
  WorkerShard& shard() { return shard_; }
  ServerCore& core() { return core_; }
  servers::DurabilityGate& gate() { return gate_; }
  servers::EpollLoop& loop() { return loop_; }

  void Start();
  // Closes every connection and stops the thread. Call after the acceptor is closed.
  void Stop();

  // Takes a freshly accepted socket (on this worker's io_context, with no operation pending),
  // or a TLS tunnel's inner end; `peer` is the client's TCP connection. Any thread.
  void Adopt(boost::asio::ip::tcp::socket socket, servers::Peer peer);
  // The TLS tunnels of this worker's clients on the TLS port.
  tls::TunnelSet& tunnels() { return tunnels_; }

  // The connection ran requests this turn: it gets its replies handled at the end of it.
  void Touch(const std::shared_ptr<Connection>& connection);
  // The connection closed: the worker lets go of it (by its id).
  void Forget(uint64_t id);

  // Closes every connection whose replies wait for a commit epoch not yet durable (the
  // increments of the current turn folded first, so that theirs count): their outcomes stay
  // unknown to them, never acknowledged. A cluster node does this when a
  // partition it owned was taken over (a write to it may never become durable). Loop thread.
  void CloseWaitingClients();

 private:
  // The loop found the socket of connection `id` ready.
  void OnSocketReady(uint64_t id, uint32_t events);
  void ScheduleEndOfTurn() { end_of_turn_scheduled_ = true; }
  // The loop's end of a turn; returns whether another turn is wanted at once.
  bool EndOfTurn();
  void Housekeeping();

  ServerCore& core_;
  const int index_;
  // Before loop_: work still queued in the loop when it is destroyed may hold sockets of io_.
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::thread io_thread_;
  servers::EpollLoop loop_;
  std::thread thread_;
  WorkerShard shard_;
  servers::DurabilityGate gate_;
  tls::TunnelSet tunnels_;

  // All below: this worker's thread only.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> connections_;  // by id
  std::vector<std::shared_ptr<Connection>> touched_;  // ran requests in this turn
  bool end_of_turn_scheduled_ = false;
};

}  // namespace tally::redis
