// SubscriptionStream: one HTTP client's live subscription — GET /v1/events (Server-Sent
// Events) or GET /v1/subscribe (a WebSocket) — on its worker's thread only.
//
// The HTTP connection hands its socket over once the route accepted the request. The
// stream registers with the SubscriptionHub, answers (200 text/event-stream, or 101
// Switching Protocols) and writes each update the hub hands it as one JSON object,
// {"key":"likes:7","value":42}: an SSE "data:" event, or a WebSocket text message.
//
// Refused before streaming, with an HTTP error: a WebSocket upgrade whose Origin header
// names another origin than the server's own (403; tallyd --http-allow-origin allows more),
// and more keys and prefixes than --subscriber-max-subscriptions (400).
//
// Limits. Updates the client has not read yet are held here only up to the hub's
// max_queued_bytes; past it the stream closes at once (a client that does not read could
// not read a reason either). When the hub drops the subscriber (max_pending), the stream
// sends the reason — an SSE event named "disconnect", or a WebSocket {"error":...} message
// then a close frame with code 1013 (try again later) — and closes, after a grace period
// at most.
//
// A WebSocket client may change what it follows with text messages
// {"subscribe":{"keys":[...],"prefixes":[...]}} and {"unsubscribe":{...}} (either list may
// be left out); a bad one, or one past --subscriber-max-subscriptions, gets {"error":...}
// and the stream goes on. An idle stream stays
// alive: SSE with a comment line every 15 s, WebSocket with pings.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/subscriptions.h"
#include "servers/http/routes.h"

namespace tally::http {

class SubscriptionStream : public std::enable_shared_from_this<SubscriptionStream> {
 public:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;

  // `on_closed` runs once the stream closed (the HTTP connection that handed it over
  // closes too).
  SubscriptionStream(engine::SubscriptionHub& hub, boost::asio::ip::tcp::socket socket,
                     std::function<void()> on_closed);
  ~SubscriptionStream();

  // Subscribes and answers `request`; then streams until the client goes, Close(), or the
  // hub drops the subscriber. A refused subscription gets its error response and closes.
  void Start(Request request, const SubscriptionRequest& subscription);
  void Close();

  // The hub's updates and drop notice (see servers::PostingSink), on this thread.
  void PushUpdates(const engine::SubscriptionDelivery& delivery);
  void DropSubscriber(std::string reason);

 private:
  bool websocket() const { return ws_.has_value(); }
  boost::asio::ip::tcp::socket& socket() { return ws_ ? ws_->next_layer() : socket_; }

  // Queues one message (an SSE event's text, or a WebSocket message) and writes.
  void Queue(std::string message);
  void Write();
  void OnWrite(const boost::system::error_code& error);
  size_t queued_bytes() const { return queued_bytes_ + writing_bytes_; }

  void ReadEvents();     // SSE: reads (and ignores) until the client closes
  void ReadWebSocket();  // WebSocket: control frames and subscribe/unsubscribe messages
  void OnWebSocketMessage();
  void KeepAlive();  // SSE: a comment line every interval, so that proxies keep it open

  // Sends `reason` after whatever is being written, then closes (at most after a grace).
  void Finish(std::string reason);
  // Answers the request with `status` ("403 Forbidden") and {"error": message} instead of
  // streaming, then closes.
  void Refuse(std::string_view status, std::string_view message);

  engine::SubscriptionHub& hub_;
  boost::asio::ip::tcp::socket socket_;  // moved into ws_ for a WebSocket
  std::optional<boost::beast::websocket::stream<boost::asio::ip::tcp::socket>> ws_;
  boost::asio::steady_timer timer_;  // keep-alive comments; then the closing grace
  std::function<void()> on_closed_;
  engine::SubscriberId subscriber_ = 0;
  // The user's key patterns, which later subscriptions must pass (null: every key).
  std::shared_ptr<const auth::User> restricted_to_;
  std::function<void(std::string object)> log_refusal_;  // SubscriptionRequest::log_refusal

  std::deque<std::string> queue_;  // messages not yet handed to the socket
  size_t queued_bytes_ = 0;
  std::string writing_;       // SSE: the bytes being written
  size_t writing_bytes_ = 0;  // bytes of the write in progress
  boost::beast::flat_buffer read_buffer_;

  bool open_ = false;  // the response head (or the WebSocket handshake) is done
  bool writing_now_ = false;
  bool finishing_ = false;     // the last message is queued: close once it is written
  std::string finish_reason_;  // why: also the WebSocket close frame's reason
  bool closed_ = false;
};

}  // namespace tally::http
