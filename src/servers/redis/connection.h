// Connection: one client's socket. Reads requests, hands them to its Session, and writes
// the replies the worker releases. Lives on its worker's thread only.
//
// Reading and writing are readiness-based (async_wait, then non-blocking reads and writes
// until the socket would block): an idle connection holds no buffer, and a burst of
// pipelined requests is read and answered in as few system calls as the kernel allows.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "servers/durability_gate.h"
#include "servers/redis/resp_parser.h"
#include "servers/redis/session.h"

namespace tally::redis {

class Worker;

class Connection final : public std::enable_shared_from_this<Connection>,
                         public servers::DurabilityWaiter {
 public:
  Connection(Worker& worker, boost::asio::ip::tcp::socket socket);
  ~Connection();

  void Start();
  void Close();
  bool closed() const { return closed_; }

  Session& session() { return *session_; }

  // The worker's DurabilityGate holds the connection's replies until their epoch is durable
  // (0 once closed: nothing is sent any more), then lets every reply produced so far leave.
  uint64_t required_epoch() const override { return closed_ ? 0 : session_->required_epoch(); }
  void ReleaseReplies() override;

  // The subscription hub's updates and drop notice (servers::PostingSink). Messages leave at
  // once unless replies before them still wait; past the hub's max_queued_bytes of unsent
  // output the client (which does not read) is closed.
  void PushUpdates(const engine::SubscriptionDelivery& delivery);
  void DropSubscriber(std::string reason);

 private:
  // The outcome of one read of the socket.
  struct ReadResult {
    boost::system::error_code error;
    size_t bytes = 0;
  };
  // Hands the reactor a read into input_: it reads when the socket becomes readable, with
  // no system call to re-arm the descriptor (a wait-only operation costs an epoll_ctl each
  // time; a read that found the socket drained does not).
  void WaitReadable();
  // Takes the reactor's read (`first`), or none when continuing a turn, then reads on until
  // the socket is drained or this turn's share is used, and runs the requests.
  void OnReadable(std::optional<ReadResult> first);
  // Makes at least kReadChunk bytes of room after input_end_.
  void MakeRoomToRead();
  // Parses and runs every whole request in the input. False when the connection must stop
  // reading (protocol error, QUIT).
  bool RunRequests();
  // Appends what `write` puts in the session's output — a message no request asked for —
  // and lets it leave at once unless replies before it still wait (for their epoch's
  // durability, or an increment's reply not filled in yet: a hole).
  template <typename Write>
  void AppendUnrequested(Write&& write);
  void TryWrite();
  void WaitWritable();
  void CompactOutput();

  Worker& worker_;
  boost::asio::ip::tcp::socket socket_;
  std::unique_ptr<Session> session_;
  RequestParser parser_;
  std::vector<std::string_view> args_;

  std::string input_;  // bytes read, from input_start_ on not yet consumed
  size_t input_start_ = 0;
  size_t input_end_ = 0;

  size_t output_sent_ = 0;   // bytes of session output already written
  size_t output_ready_ = 0;  // bytes of session output released for writing

  bool closed_ = false;
  bool reading_stopped_ = false;
  bool write_waiting_ = false;
};

}  // namespace tally::redis
