#include "servers/http/connection.h"

#include <fmt/format.h>

#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "core/json_writer.h"
#include "servers/http/worker.h"
#include "servers/protected_mode.h"

namespace tally::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// How long a closing connection keeps reading what the client still sends (see Linger).
constexpr std::chrono::milliseconds kLinger{2000};
constexpr std::chrono::milliseconds kRefusedLinger{1000};
constexpr size_t kDrainChunk = size_t{64} * 1024;
// A batch takes at most this many pipelined requests, or stops once its responses pass
// this many bytes; the rest are read after it is sent.
constexpr size_t kMaxBatchRequests = 128;
constexpr size_t kMaxBatchBytes = size_t{1} << 20;
// What a batch reads from the socket beyond the request that started it, at most, so that
// one client's stream cannot hold up the others of its thread.
constexpr size_t kMaxReadAhead = size_t{1} << 20;
constexpr size_t kReadChunk = size_t{64} * 1024;
// A buffer grown past this (a large request or batch) is given back once empty, so that
// idle connections stay cheap.
constexpr size_t kKeptBufferBytes = size_t{64} * 1024;

// Boost 1.74's Beast has its own string_view.
std::string_view View(beast::string_view text) { return {text.data(), text.size()}; }

struct ResponseHead {
  unsigned version = 11;  // of the request: 10 or 11
  int status = 200;
  std::string_view content_type = "application/json";
  std::string_view etag;           // sent when not empty
  std::string_view cache_control;  // sent when not empty
  std::string_view allow;
  bool keep_alive = true;
  bool head = false;  // the request was HEAD: no body
  bool retry_after = false;
  bool authenticate = false;  // 401: name the scheme
};

// Appends one response: status line, headers, body.
void AppendResponse(const ResponseHead& head, std::string_view body, std::string* out) {
  const auto reason = bhttp::obsolete_reason(bhttp::int_to_status(head.status));
  fmt::format_to(std::back_inserter(*out), "HTTP/{}.{} {} {}\r\n", head.version / 10,
                 head.version % 10, head.status, View(reason));
  // A 304 (Not Modified) has no body, and no Content-Length: it would have to be the full
  // representation's.
  if (head.status != 304) {
    fmt::format_to(std::back_inserter(*out), "Content-Type: {}\r\nContent-Length: {}\r\n",
                   head.content_type, body.size());
  }
  if (!head.etag.empty()) fmt::format_to(std::back_inserter(*out), "ETag: {}\r\n", head.etag);
  if (!head.cache_control.empty()) {
    fmt::format_to(std::back_inserter(*out), "Cache-Control: {}\r\n", head.cache_control);
  }
  if (!head.allow.empty()) fmt::format_to(std::back_inserter(*out), "Allow: {}\r\n", head.allow);
  if (head.retry_after) out->append("Retry-After: 1\r\n");
  if (head.authenticate) out->append("WWW-Authenticate: Bearer realm=\"tally\"\r\n");
  if (!head.keep_alive) {
    out->append("Connection: close\r\n");
  } else if (head.version == 10) {
    out->append("Connection: keep-alive\r\n");
  }
  out->append("\r\n");
  if (!head.head) out->append(body);
}

struct Failure {
  int status;
  std::string message;
};

// What a failed read of a request tells the client; nothing when the client went away
// (end of stream, a reset) and nobody is left to tell.
std::optional<Failure> FailureOf(const boost::system::error_code& error,
                                 const HttpOptions& options) {
  if (error.category() != bhttp::make_error_code(bhttp::error::body_limit).category() ||
      error == bhttp::error::end_of_stream || error == bhttp::error::partial_message) {
    return std::nullopt;
  }
  if (error == bhttp::error::body_limit) {
    return Failure{
        413, fmt::format("the request body is over the limit of {} bytes", options.max_body_bytes)};
  }
  if (error == bhttp::error::header_limit) {
    return Failure{431, fmt::format("the request line and header fields are over the limit "
                                    "of {} bytes",
                                    options.max_header_bytes)};
  }
  return Failure{400, fmt::format("malformed HTTP request: {}", error.message())};
}

}  // namespace

HttpConnection::HttpConnection(HttpWorker& worker, asio::ip::tcp::socket socket, bool counted,
                               const servers::Peer& peer)
    : worker_(worker),
      socket_(std::move(socket)),
      client_ip_(peer.remote.address().to_string()),
      deadline_(socket_.get_executor()),
      counted_(counted) {
  boost::system::error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);  // fails on a TLS tunnel's
}

HttpConnection::~HttpConnection() {
  if (!closed_ && counted_) worker_.shared().connections.fetch_sub(1, std::memory_order_relaxed);
}

void HttpConnection::Start() { ReadRequest(); }

void HttpConnection::Refuse() {
  RefuseWith(503,
             fmt::format("too many connections (the limit is {})",
                         worker_.shared().options.max_connections),
             /*retry_after=*/true);
}

void HttpConnection::RefuseProtected() {
  RefuseWith(403, servers::kProtectedModeMessage, /*retry_after=*/false);
}

void HttpConnection::RefuseWith(int status, std::string_view message, bool retry_after) {
  keep_alive_ = false;
  worker_.shared().requests.Count(-1, status);
  ResponseHead head;
  head.status = status;
  head.keep_alive = false;
  head.retry_after = retry_after;
  AppendResponse(head, ErrorJson(message), &output_);
  Write();
}

void HttpConnection::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  deadline_.cancel();
  socket_.close(ignored);
  if (stream_) stream_->Close();
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

void HttpConnection::ArmIdle() {
  const int64_t timeout = worker_.shared().options.idle_timeout_seconds;
  if (timeout > 0) Arm(std::chrono::seconds(timeout));
}

void HttpConnection::OnDeadline() {
  if (closed_) return;
  timed_out_ = true;
  // The pending read or write completes with operation_aborted; its handler decides.
  boost::system::error_code ignored;
  socket_.cancel(ignored);
}

bool HttpConnection::ParseBuffered(boost::system::error_code* error) {
  if (!parser_) {
    const HttpOptions& options = worker_.shared().options;
    parser_.emplace();
    parser_->header_limit(options.max_header_bytes);
    parser_->body_limit(options.max_body_bytes);
  }
  while (buffer_.size() > 0 && !parser_->is_done()) {
    const size_t used = parser_->put(buffer_.data(), *error);
    buffer_.consume(used);
    if (*error == bhttp::error::need_more) {
      error->clear();
      return false;
    }
    if (*error || used == 0) return false;
  }
  return parser_->is_done();
}

bool HttpConnection::ReadAvailable(size_t* read_total) {
  boost::system::error_code error;
  const size_t available = socket_.available(error);
  if (error || available == 0) return false;
  // Does not block: the bytes are there.
  const size_t n = socket_.read_some(buffer_.prepare(std::min(available, kReadChunk)), error);
  if (error) return false;  // the next asynchronous read reports it
  buffer_.commit(n);
  *read_total += n;
  return n > 0;
}

void HttpConnection::ReadRequest() {
  boost::system::error_code ignored;
  ParseBuffered(&ignored);  // creates the parser; errors surface again in the read below
  reading_ = true;
  ArmIdle();
  if (parser_->is_header_done()) {
    OnHeader({});
    return;
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
  const auto& request = parser_->get();
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
  Run();
  // Requests a pipelining client sent behind this one join the batch, as far as they have
  // arrived: from the buffer, then from the socket without waiting.
  size_t read_ahead = 0;
  while (keep_alive_ && !hand_off_ && batch_requests_ < kMaxBatchRequests &&
         output_.size() < kMaxBatchBytes) {
    boost::system::error_code parse_error;
    if (ParseBuffered(&parse_error)) {
      Run();
      continue;
    }
    if (parse_error) {
      auto failure = FailureOf(parse_error, worker_.shared().options);
      if (!failure) failure = Failure{400, "malformed HTTP request: " + parse_error.message()};
      AppendError(failure->status, failure->message);
      break;
    }
    // The next request is incomplete: it is read once the batch is sent, unless more of it
    // is already waiting in the socket.
    if (read_ahead >= kMaxReadAhead || !ReadAvailable(&read_ahead)) break;
  }
  FinishBatch();
}

ApiRequest ApiRequestOf(const SubscriptionStream::Request& request) {
  ApiRequest api_request;
  api_request.method = View(request.method_string());
  api_request.target = View(request.target());
  if (const auto key = request.find("Idempotency-Key"); key != request.end()) {
    api_request.has_idempotency_key = true;
    api_request.idempotency_key = View(key->value());
  }
  api_request.body = request.body();
  if (const auto authorization = request.find(bhttp::field::authorization);
      authorization != request.end()) {
    api_request.authorization = View(authorization->value());
  }
  if (const auto tags = request.find(bhttp::field::if_none_match); tags != request.end()) {
    api_request.if_none_match = View(tags->value());
  }
  api_request.websocket_upgrade = beast::websocket::is_upgrade(request);
  return api_request;
}

void HttpConnection::Run() {
  const auto& request = parser_->get();
  ApiRequest api_request = ApiRequestOf(request);
  api_request.client_address = client_ip_;
  api_request.auth_cache = &auth_cache_;
  ApiResponse response = worker_.api().Handle(api_request);
  if (response.subscription) {
    if (worker_.shared().services.subscriptions != nullptr) {
      hand_off_.emplace(HandOffRequest{parser_->release(), std::move(*response.subscription)});
      ++batch_requests_;
      parser_.reset();
      return;
    }
    response = ApiResponse{};
    response.status = 503;
    response.body = ErrorJson("live subscriptions are not enabled on this server");
  }
  keep_alive_ = request.keep_alive();
  ResponseHead head;
  head.version = request.version();
  head.status = response.status;
  head.content_type = response.content_type;
  head.etag = response.etag;
  head.cache_control = response.cache_control;
  head.allow = response.allow;
  head.authenticate = response.authenticate;
  head.keep_alive = keep_alive_;
  head.head = request.method() == bhttp::verb::head;
  AppendResponse(head, response.body, &output_);
  batch_epoch_ = std::max(batch_epoch_, response.required_epoch);
  batch_wrote_ = batch_wrote_ || response.wrote;
  ++batch_requests_;
  parser_.reset();  // the request's body may be large: free it before waiting
}

void HttpConnection::OnReadError(const boost::system::error_code& error) {
  if (closed_) return;
  if (error == asio::error::operation_aborted && timed_out_) {
    const bool started = buffer_.size() > 0 || (parser_ && parser_->got_some());
    if (reading_ && started) {
      AppendError(408, fmt::format("the request did not arrive whole within {} s",
                                   worker_.shared().options.idle_timeout_seconds));
      FinishBatch();
    } else {
      Close();  // an idle keep-alive connection: nothing to say
    }
    return;
  }
  const auto failure = FailureOf(error, worker_.shared().options);
  if (!failure) {
    Close();  // the client went away (or the socket failed): nobody to answer
    return;
  }
  AppendError(failure->status, failure->message);
  FinishBatch();
}

void HttpConnection::AppendError(int status, std::string_view message) {
  worker_.shared().requests.Count(-1, status);
  reading_ = false;
  keep_alive_ = false;
  parser_.reset();
  ResponseHead head;
  head.status = status;
  head.keep_alive = false;
  AppendResponse(head, ErrorJson(message), &output_);
}

void HttpConnection::FinishBatch() {
  // In async mode an acknowledged change must be in the commit log before its response leaves.
  if (batch_wrote_) worker_.gate().LogAsyncWrites();
  worker_.WhenDurable(shared_from_this());
}

void HttpConnection::Write() {
  if (closed_) return;
  ArmIdle();
  asio::async_write(socket_, asio::buffer(output_),
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
  if (output_.capacity() > kKeptBufferBytes) {
    std::string().swap(output_);
  } else {
    output_.clear();
  }
  batch_requests_ = 0;
  batch_epoch_ = 0;
  batch_wrote_ = false;
  if (hand_off_) {
    HandOff();
    return;
  }
  if (!keep_alive_) {
    Linger(counted_ ? kLinger : kRefusedLinger);
    return;
  }
  if (buffer_.size() == 0 && buffer_.capacity() > kKeptBufferBytes) buffer_.shrink_to_fit();
  ReadRequest();
}

void HttpConnection::HandOff() {
  HandOffRequest hand_off = std::move(*hand_off_);
  hand_off_.reset();
  stream_ = std::make_shared<SubscriptionStream>(*worker_.shared().services.subscriptions,
                                                 std::move(socket_), [self = weak_from_this()] {
                                                   if (auto connection = self.lock())
                                                     connection->Close();
                                                 });
  stream_->Start(std::move(hand_off.request), hand_off.subscription);
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
