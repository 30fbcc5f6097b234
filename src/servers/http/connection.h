// HttpConnection: one client's socket, on its worker's thread only.
//
// A connection alternates between reading and writing, one operation at a time. It reads
// one request, then also takes every further request that has already arrived (a
// pipelining client's), up to a bound: the batch. Each request goes to the worker's
// Api; the responses, serialized in order, wait until the newest commit epoch they depend
// on is durable, so one commit and one write serve the whole batch. Then it reads again,
// while the connection is kept alive.
//
// Bad input ends the connection, never the server: a header over the limit gets 431, a
// body over it 413 (as soon as its Content-Length is read), malformed HTTP 400, a request
// not received whole within the idle timeout 408 (an idle keep-alive connection is closed
// silently). After such an error the response carries "Connection: close", the sending
// side is shut down and whatever the client still sends is read and discarded for a
// moment, so that the client sees the response rather than a reset.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "servers/durability_gate.h"
#include "servers/http/routes.h"
#include "servers/http/subscription_stream.h"
#include "servers/peer.h"

namespace tally::http {

class HttpWorker;

// A parsed request as the Api takes it: method, target, body and the headers it reads
// (Idempotency-Key, Authorization, If-None-Match, a WebSocket upgrade). Views into `request`.
ApiRequest ApiRequestOf(const SubscriptionStream::Request& request);

class HttpConnection final : public std::enable_shared_from_this<HttpConnection>,
                             public servers::DurabilityWaiter {
 public:
  // `counted`: the connection counts against max_connections until it is closed. The socket
  // may be a TLS tunnel's inner end; `peer` is then the tunnel's client.
  HttpConnection(HttpWorker& worker, boost::asio::ip::tcp::socket socket, bool counted,
                 const servers::Peer& peer);
  ~HttpConnection();

  // Serves requests until the client or an error ends the connection.
  void Start();
  // Answers 503 (too many connections) and closes.
  void Refuse();
  // Answers 403 with protected mode's explanation (servers/protected_mode.h) and closes.
  void RefuseProtected();
  void Close();

  // The worker's DurabilityGate holds the batch until its epoch is durable (0 once closed),
  // then sends it.
  uint64_t required_epoch() const override { return closed_ ? 0 : batch_epoch_; }
  void ReleaseReplies() override { Write(); }

 private:
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  // Answers `status` with {"error": message} before any request is read, and closes.
  void RefuseWith(int status, std::string_view message, bool retry_after);
  // Reads the rest of the current request (parser_ may hold part of it already).
  void ReadRequest();
  void OnHeader(const boost::system::error_code& error);
  void ReadBody();
  void OnRequest(const boost::system::error_code& error);
  void OnReadError(const boost::system::error_code& error);
  // Runs parser_'s complete request and appends its response to the batch.
  void Run();
  // Feeds buffered bytes to parser_ (a fresh one if none). True once it holds a complete
  // request; false when it needs more bytes or failed (`error`).
  bool ParseBuffered(boost::system::error_code* error);
  // Moves bytes already waiting in the socket into buffer_, without waiting; adds their
  // count to `read_total`. False when there were none.
  bool ReadAvailable(size_t* read_total);
  // Appends a response that ends the connection.
  void AppendError(int status, std::string_view message);
  // Sends the batch once its epoch is durable.
  void FinishBatch();
  void Write();
  void OnWrite(const boost::system::error_code& error);
  // Shuts down the sending side, reads and discards until the client closes or `linger`
  // passes, then closes.
  void Linger(std::chrono::milliseconds linger);
  void Drain();
  // Gives the socket to a SubscriptionStream for hand_off_; this connection stays (counted)
  // until the stream ends.
  void HandOff();

  // The deadline of the current read, write or linger; on expiry OnDeadline().
  void Arm(std::chrono::steady_clock::duration timeout);
  void ArmIdle();
  void OnDeadline();

  HttpWorker& worker_;
  boost::asio::ip::tcp::socket socket_;
  const std::string client_ip_;  // the client's address, for the Api (failed passwords)
  AuthCache auth_cache_;         // the credentials last accepted on this connection
  boost::asio::steady_timer deadline_;
  boost::beast::flat_buffer buffer_;  // bytes read and not yet parsed (pipelined requests)
  std::optional<Parser> parser_;      // the request being read, when one is

  // The batch: responses in request order, ready to send once batch_epoch_ is durable.
  std::string output_;
  size_t batch_requests_ = 0;
  uint64_t batch_epoch_ = 0;
  bool batch_wrote_ = false;  // a request of the batch changed counters

  const bool counted_;
  bool keep_alive_ = true;  // false once a response ends the connection
  bool reading_ = false;    // a request is being read (the deadline means 408 or silence)
  bool timed_out_ = false;  // the deadline cancelled the pending operation
  bool closed_ = false;

  // A subscription route accepted the request: once the batch before it is written, the
  // socket goes to a SubscriptionStream.
  struct HandOffRequest {
    SubscriptionStream::Request request;
    SubscriptionRequest subscription;
  };
  std::optional<HandOffRequest> hand_off_;
  std::shared_ptr<SubscriptionStream> stream_;
};

}  // namespace tally::http
