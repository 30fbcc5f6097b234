// Connection: one client's socket. Reads requests, hands them to its Session, and writes
// the replies the worker releases. Lives on its worker's thread only.
//
// The socket is a plain non-blocking descriptor in its worker's EpollLoop (level-triggered
// epoll, see servers/epoll_loop.h): when it is readable, reads go on into at least 16 KiB of
// room until one comes back short (the socket is empty) or this turn's share is used, so a
// burst of pipelined requests is read in as few system calls as the kernel allows and a
// request at pipeline depth 1 costs one read and one send. Writing is non-blocking; only when
// the socket's send buffer is full is the socket watched for room to write.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <string>
#include <vector>

#include "servers/durability_gate.h"
#include "servers/peer.h"
#include "servers/redis/resp_parser.h"
#include "servers/redis/session.h"

namespace tally::redis {

class Worker;

class Connection final : public std::enable_shared_from_this<Connection>,
                         public servers::DurabilityWaiter {
 public:
  // `peer`: where the client is (the socket may be a TLS tunnel's inner end). The connection
  // takes the socket's descriptor out of Asio's hands.
  Connection(Worker& worker, boost::asio::ip::tcp::socket socket, const servers::Peer& peer);
  ~Connection();

  // Joins the worker's epoll set; a connection that cannot is closed.
  void Start();
  void Close();
  bool closed() const { return closed_; }
  // The client's id (CLIENT ID), which is also its token in the worker's epoll set.
  uint64_t id() const { return session_->info().id; }

  // The loop found the socket ready: `events` are epoll's bits.
  void OnReady(uint32_t events);

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

  // When the request being received began (ms of the keyspace clock): when the input last
  // held no partial request, or the last whole request was taken from it. 0 while there is
  // no partial request. The worker's housekeeping compares it with --request-timeout.
  int64_t partial_request_since_ms() const { return partial_request_since_ms_; }
  // Tells the client its request did not arrive whole within `seconds`, and closes.
  void TimeOutRequest(int64_t seconds);

 private:
  // Reads until the socket is drained or this turn's share is used, and runs the requests.
  void OnReadable();
  // Stops reading: the client closed its end, sent QUIT, or broke the protocol.
  void StopReading();
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
  // Tells the loop what the socket waits for now (reading unless stopped; writing while
  // the send buffer is full).
  void UpdateWatch();
  void CompactOutput();

  Worker& worker_;
  int fd_ = -1;  // the socket; owned, closed by Close()
  std::unique_ptr<Session> session_;
  RequestParser parser_;
  std::vector<std::string_view> args_;

  std::string input_;  // bytes read, from input_start_ on not yet consumed
  size_t input_start_ = 0;
  size_t input_end_ = 0;

  int64_t partial_request_since_ms_ = 0;
  uint64_t requests_run_ = 0;  // whole requests taken from the input, ever

  size_t output_sent_ = 0;   // bytes of session output already written
  size_t output_ready_ = 0;  // bytes of session output released for writing

  bool closed_ = false;
  bool reading_stopped_ = false;
  bool write_waiting_ = false;
};

}  // namespace tally::redis
