#include "servers/http/connection.h"

#include <fmt/format.h>

#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "servers/http/json_writer.h"
#include "servers/http/worker.h"

namespace tally::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

// Boost 1.74's Beast has its own string_view.
std::string_view View(beast::string_view text) { return {text.data(), text.size()}; }

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// How long a closing connection keeps reading what the client still sends (see Linger).
constexpr std::chrono::milliseconds kLinger{2000};
constexpr std::chrono::milliseconds kRefusedLinger{1000};
constexpr size_t kDrainChunk = size_t{64} * 1024;
// A read buffer grown past this (a large request) is given back once empty, so that idle
// connections stay cheap.
constexpr size_t kKeptBufferBytes = size_t{64} * 1024;

}  // namespace

HttpConnection::HttpConnection(HttpWorker& worker, asio::ip::tcp::socket socket, bool counted)
    : worker_(worker),
      socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      counted_(counted) {
  boost::system::error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
}

HttpConnection::~HttpConnection() {
  if (!closed_ && counted_) worker_.shared().connections.fetch_sub(1, std::memory_order_relaxed);
}

void HttpConnection::Start() { ReadHeader(); }

void HttpConnection::Refuse() {
  keep_alive_ = false;
  Prepare(503,
          ErrorJson(fmt::format("too many connections (the limit is {})",
                                worker_.shared().options.max_connections)),
          "", 11);
  response_.set(bhttp::field::retry_after, "1");
  Write();
}

void HttpConnection::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  deadline_.cancel();
  socket_.close(ignored);
  if (counted_) worker_.shared().connections.fetch_sub(1, std::memory_order_relaxed);
  worker_.Forget(this);
}

void HttpConnection::Arm(std::chrono::steady_clock::duration timeout) {
  timed_out_ = false;
  deadline_.expires_after(timeout);
  deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
    if (!error) self->OnDeadline();
  });
}

void HttpConnection::OnDeadline() {
  if (closed_) return;
  timed_out_ = true;
  // The pending read or write completes with operation_aborted; its handler decides.
  boost::system::error_code ignored;
  socket_.cancel(ignored);
}

void HttpConnection::ReadHeader() {
  const HttpOptions& options = worker_.shared().options;
  parser_.emplace();
  parser_->header_limit(options.max_header_bytes);
  parser_->body_limit(options.max_body_bytes);
  reading_ = true;
  if (options.idle_timeout_seconds > 0) {
    Arm(std::chrono::seconds(options.idle_timeout_seconds));
  }
  bhttp::async_read_header(socket_, buffer_, *parser_,
                           [self = shared_from_this()](const boost::system::error_code& error,
                                                       size_t) { self->OnHeader(error); });
}

void HttpConnection::OnHeader(const boost::system::error_code& error) {
  if (error) {
    OnReadError(error);
    return;
  }
  const Request& request = parser_->get();
  if (request.version() == 11 && !parser_->is_done() &&
      beast::iequals(request[bhttp::field::expect], "100-continue")) {
    // The client waits for this before it sends the body (curl does for large bodies).
    asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                        if (error) {
                          self->OnReadError(error);
                        } else {
                          self->ReadBody();
                        }
                      });
    return;
  }
  ReadBody();
}

void HttpConnection::ReadBody() {
  bhttp::async_read(socket_, buffer_, *parser_,
                    [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                      self->OnRequest(error);
                    });
}

void HttpConnection::OnRequest(const boost::system::error_code& error) {
  if (error) {
    OnReadError(error);
    return;
  }
  reading_ = false;
  deadline_.cancel();
  const Request& request = parser_->get();
  ApiRequest api_request;
  api_request.method = View(request.method_string());
  api_request.target = View(request.target());
  if (const auto key = request.find("Idempotency-Key"); key != request.end()) {
    api_request.has_idempotency_key = true;
    api_request.idempotency_key = View(key->value());
  }
  api_request.body = request.body();
  ApiResponse response = worker_.api().Handle(api_request);
  keep_alive_ = request.keep_alive();
  Prepare(response.status, std::move(response.body), response.allow, request.version());
  if (request.method() == bhttp::verb::head) {
    // No route takes HEAD (it gets 405), but its response must still have no body.
    response_.body().clear();
  }
  parser_.reset();  // the request's body may be large: free it before waiting

  engine::Engine& engine = worker_.shared().engine;
  if (response.wrote && engine.durability() == engine::Durability::kAsync) {
    // An acknowledged change must be in the commit log before its response leaves.
    engine.committer().CommitWrittenInline();
  }
  worker_.WhenDurable(response.required_epoch, [self = shared_from_this()] { self->Write(); });
}

void HttpConnection::OnReadError(const boost::system::error_code& error) {
  if (closed_) return;
  const HttpOptions& options = worker_.shared().options;
  if (error == asio::error::operation_aborted && timed_out_) {
    const bool started = buffer_.size() > 0 || (parser_ && parser_->got_some());
    if (reading_ && started) {
      SendError(408, fmt::format("the request did not arrive whole within {} s",
                                 options.idle_timeout_seconds));
    } else {
      Close();  // an idle keep-alive connection: nothing to say
    }
    return;
  }
  if (error.category() != bhttp::make_error_code(bhttp::error::body_limit).category() ||
      error == bhttp::error::end_of_stream || error == bhttp::error::partial_message) {
    Close();  // the client went away (or the socket failed): nobody to answer
    return;
  }
  if (error == bhttp::error::body_limit) {
    SendError(
        413, fmt::format("the request body is over the limit of {} bytes", options.max_body_bytes));
  } else if (error == bhttp::error::header_limit) {
    SendError(431, fmt::format("the request line and header fields are over the limit of {} "
                               "bytes",
                               options.max_header_bytes));
  } else {
    SendError(400, fmt::format("malformed HTTP request: {}", error.message()));
  }
}

void HttpConnection::Prepare(int status, std::string body, std::string_view allow,
                             unsigned request_version) {
  response_ = Response();
  response_.version(request_version);
  response_.result(static_cast<unsigned>(status));
  response_.set(bhttp::field::content_type, "application/json");
  if (!allow.empty())
    response_.set(bhttp::field::allow, beast::string_view(allow.data(), allow.size()));
  response_.body() = std::move(body);
  response_.keep_alive(keep_alive_);
  response_.prepare_payload();
}

void HttpConnection::SendError(int status, std::string_view message) {
  reading_ = false;
  keep_alive_ = false;
  Prepare(status, ErrorJson(message), "", 11);
  parser_.reset();
  Write();
}

void HttpConnection::Write() {
  if (closed_) return;
  const int64_t timeout = worker_.shared().options.idle_timeout_seconds;
  if (timeout > 0) Arm(std::chrono::seconds(timeout));
  bhttp::async_write(socket_, response_,
                     [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                       self->OnWrite(error);
                     });
}

void HttpConnection::OnWrite(const boost::system::error_code& error) {
  if (closed_) return;
  if (error) {
    Close();
    return;
  }
  deadline_.cancel();
  response_ = Response();
  if (!keep_alive_) {
    Linger(counted_ ? kLinger : kRefusedLinger);
    return;
  }
  if (buffer_.size() == 0 && buffer_.capacity() > kKeptBufferBytes) buffer_.shrink_to_fit();
  ReadHeader();
}

void HttpConnection::Linger(std::chrono::milliseconds linger) {
  // Closing a socket with unread input makes the kernel send a reset, which can destroy
  // the response before the client reads it. So: no more sending, read what comes.
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  Arm(linger);
  Drain();
}

void HttpConnection::Drain() {
  // One discard buffer per thread: what lands in it is never looked at.
  thread_local std::vector<char> discard(kDrainChunk);
  socket_.async_read_some(
      asio::buffer(discard),
      [self = shared_from_this()](const boost::system::error_code& error, size_t) {
        if (error || self->closed_) {
          self->Close();
        } else {
          self->Drain();
        }
      });
}

}  // namespace tally::http
