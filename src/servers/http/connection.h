// HttpConnection: one client's socket, on its worker's thread only. Reads one request at
// a time (pipelined requests wait in the read buffer), hands it to the worker's Api,
// holds the response until its epoch is durable, writes it, and reads the next one while
// the connection is kept alive.
//
// Bad input ends the connection, never the server: a header over the limit gets 431, a
// body over it 413 (as soon as its Content-Length is read), malformed HTTP 400, a request
// not received within the idle timeout 408 (an idle keep-alive connection is closed
// silently). After such an error the response carries "Connection: close", the sending
// side is shut down and whatever the client still sends is read and discarded for a
// moment, so that the client sees the response rather than a reset.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "servers/http/routes.h"

namespace tally::http {

class HttpWorker;

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  // `counted`: the connection counts against max_connections until it is closed.
  HttpConnection(HttpWorker& worker, boost::asio::ip::tcp::socket socket, bool counted);
  ~HttpConnection();

  // Serves requests until the client or an error ends the connection.
  void Start();
  // Answers 503 (too many connections) and closes.
  void Refuse();
  void Close();

 private:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using Response = boost::beast::http::response<boost::beast::http::string_body>;

  void ReadHeader();
  void OnHeader(const boost::system::error_code& error);
  void ReadBody();
  void OnRequest(const boost::system::error_code& error);
  void OnReadError(const boost::system::error_code& error);
  // Fills response_ for `request_version`; keep_alive_ decides "Connection".
  void Prepare(int status, std::string body, std::string_view allow, unsigned request_version);
  void SendError(int status, std::string_view message);
  void Write();
  void OnWrite(const boost::system::error_code& error);
  // Shuts down the sending side, reads and discards until the client closes or `linger`
  // passes, then closes.
  void Linger(std::chrono::milliseconds linger);
  void Drain();

  // The deadline of the current read, write or linger; on expiry OnDeadline().
  void Arm(std::chrono::steady_clock::duration timeout);
  void OnDeadline();

  HttpWorker& worker_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer deadline_;
  boost::beast::flat_buffer buffer_;  // bytes read and not yet parsed (pipelined requests)
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  Response response_;
  const bool counted_;
  bool keep_alive_ = true;
  bool reading_ = false;    // a request is being read (the deadline means 408 or silence)
  bool timed_out_ = false;  // the deadline cancelled the pending operation
  bool closed_ = false;
};

}  // namespace tally::http
