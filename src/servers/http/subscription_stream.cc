#include "servers/http/subscription_stream.h"

#include <fmt/format.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/http/field.hpp>
#include <cctype>
#include <chrono>

#include "core/integer.h"
#include "core/json_writer.h"
#include "engine/databases.h"
#include "servers/subscription_sink.h"

namespace tally::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = boost::beast::websocket;

// An idle SSE stream gets a comment line this often (proxies close silent connections);
// a WebSocket is pinged after half of this idle time, and closed after all of it.
constexpr std::chrono::seconds kKeepAlive{15};
constexpr std::chrono::seconds kWebSocketIdle{30};
// How long a stream that is finishing may take to write its reason before it is closed.
constexpr std::chrono::seconds kGrace{2};
// The largest message a WebSocket client may send (a subscribe or unsubscribe request).
constexpr size_t kMaxClientMessage = size_t{64} << 10;
// A close frame's reason holds at most 123 bytes.
constexpr size_t kMaxCloseReason = 123;

// The head of the SSE response. The body ends when the connection does (no length, no
// chunks); "retry" tells EventSource to reconnect after a second, and the no-cache and
// X-Accel-Buffering headers keep caches and nginx from holding events back.
constexpr std::string_view kEventStreamHead =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/event-stream\r\n"
    "Cache-Control: no-cache\r\n"
    "X-Accel-Buffering: no\r\n"
    "\r\n"
    "retry: 1000\n\n";

// {"key":"likes:7","value":42}; a value shown as more than its integer as reads show it
// ({"key":"shop_stats:4","value":{"orders":2,"revenue":"12.75"}}).
void AppendUpdateJson(const engine::SubscriptionUpdate& update, std::string* out) {
  out->append(R"({"key":)");
  AppendJsonString(update.key, out);
  out->append(R"(,"value":)");
  if (update.shown) {
    out->append(update.shown->json);
  } else {
    char digits[24];
    out->append(digits, FormatInt64(update.value, digits));
  }
  out->push_back('}');
}

// The keys and prefixes of a WebSocket client's {"subscribe"|"unsubscribe": {...}}.
struct ClientRequest {
  bool subscribe = true;
  std::vector<std::string> keys;
  std::vector<std::string> prefixes;
};

constexpr std::string_view kClientRequestShape =
    R"(a message must be {"subscribe": {"keys": [...], "prefixes": [...]}} or {"unsubscribe": {...}})";

Result<std::vector<std::string>> StringList(simdjson::dom::element element, std::string_view name) {
  simdjson::dom::array array;
  if (element.get(array))
    return InvalidArgument(fmt::format("\"{}\" must be an array of strings", name));
  std::vector<std::string> list;
  for (const auto item : array) {
    std::string_view text;
    if (item.get(text))
      return InvalidArgument(fmt::format("\"{}\" must be an array of strings", name));
    // The HTTP API follows database 0, where no key starts with the reserved prefix.
    if (engine::IsReservedKey(text))
      return InvalidArgument(std::string(engine::kReservedKeyMessage));
    list.emplace_back(text);
  }
  return list;
}

Result<ClientRequest> ParseClientRequest(std::string_view text) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element document;
  if (auto error = parser.parse(text.data(), text.size()).get(document)) {
    return InvalidArgument(fmt::format("invalid JSON: {}", simdjson::error_message(error)));
  }
  simdjson::dom::object object;
  if (document.get(object) || object.size() != 1)
    return InvalidArgument(std::string(kClientRequestShape));
  ClientRequest request;
  const auto field = *object.begin();
  if (field.key == "unsubscribe") {
    request.subscribe = false;
  } else if (field.key != "subscribe") {
    return InvalidArgument(std::string(kClientRequestShape));
  }
  simdjson::dom::object lists;
  if (field.value.get(lists)) return InvalidArgument(std::string(kClientRequestShape));
  for (const auto list : lists) {
    if (list.key == "keys") {
      auto keys = StringList(list.value, "keys");
      if (!keys) return tl::unexpected(keys.error());
      request.keys = std::move(*keys);
    } else if (list.key == "prefixes") {
      auto prefixes = StringList(list.value, "prefixes");
      if (!prefixes) return tl::unexpected(prefixes.error());
      request.prefixes = std::move(*prefixes);
    } else {
      return InvalidArgument(
          fmt::format("unknown field \"{}\": {}", list.key, kClientRequestShape));
    }
  }
  return request;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return std::ranges::equal(a, b, [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

// Whether a WebSocket upgrade from `origin` (the Origin header) may proceed. A browser names
// the page that opens a WebSocket there, and holds WebSockets to no same-origin rule: without
// this check, any web page could read the counters of a server without --requirepass.
// Allowed: the server's own origin (scheme://<the Host header>), and the `allowed` ones
// ("*": any).
bool OriginAllowed(std::string_view origin, std::string_view host,
                   const std::vector<std::string>& allowed) {
  for (const std::string& one : allowed) {
    if (one == "*" || EqualsIgnoringCase(one, origin)) return true;
  }
  const size_t scheme_end = origin.find("://");
  if (scheme_end == std::string_view::npos || host.empty()) return false;
  return EqualsIgnoringCase(origin.substr(scheme_end + 3), host);
}

std::string_view View(beast::string_view text) { return {text.data(), text.size()}; }

}  // namespace

SubscriptionStream::SubscriptionStream(engine::SubscriptionHub& hub, asio::ip::tcp::socket socket,
                                       std::function<void()> on_closed)
    : hub_(hub),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      on_closed_(std::move(on_closed)) {}

SubscriptionStream::~SubscriptionStream() {
  if (subscriber_ != 0) hub_.RemoveSubscriber(subscriber_);
}

void SubscriptionStream::Start(Request request, const SubscriptionRequest& subscription) {
  restricted_to_ = subscription.restricted_to;
  log_refusal_ = subscription.log_refusal;
  if (const auto origin = request.find(beast::http::field::origin);
      subscription.websocket && origin != request.end() &&
      !OriginAllowed(View(origin->value()), View(request[beast::http::field::host]),
                     hub_.options().allowed_origins)) {
    Refuse("403 Forbidden",
           fmt::format("a WebSocket may be opened only by pages of this server's own origin, or "
                       "of one given to tallyd --http-allow-origin; not by '{}'",
                       View(origin->value())));
    return;
  }
  subscriber_ = hub_.AddSubscriber(std::make_shared<servers::PostingSink<SubscriptionStream>>(
      [executor = socket_.get_executor()](std::function<void()> work) {
        boost::asio::post(executor, std::move(work));
      },
      weak_from_this()));
  // Updates the hub hands over before the response head is out wait in the queue.
  const Status subscribed = hub_.Subscribe(subscriber_, subscription.keys, subscription.prefixes);
  if (!subscribed && subscribed.error().code == ErrorCode::kInvalidArgument) {
    Refuse("400 Bad Request", subscribed.error().message);  // too many subscriptions
    return;
  }
  if (!subscription.websocket) {
    Queue(std::string(kEventStreamHead));
    open_ = true;
    Write();
    if (!subscribed) {
      Finish(subscribed.error().message);
      return;
    }
    ReadEvents();
    KeepAlive();
    return;
  }
  ws_.emplace(std::move(socket_));
  auto timeouts = websocket::stream_base::timeout::suggested(beast::role_type::server);
  timeouts.idle_timeout = kWebSocketIdle;
  timeouts.keep_alive_pings = true;
  ws_->set_option(timeouts);
  ws_->set_option(websocket::stream_base::decorator([](websocket::response_type& response) {
    response.set(beast::http::field::server, "tally");
  }));
  ws_->read_message_max(kMaxClientMessage);
  ws_->async_accept(
      request, [self = shared_from_this(), subscribed](const boost::system::error_code& error) {
        if (self->closed_) return;
        if (error) {
          self->Close();
          return;
        }
        self->open_ = true;
        if (!subscribed) {
          self->Finish(subscribed.error().message);
          return;
        }
        self->Write();
        self->ReadWebSocket();
      });
}

void SubscriptionStream::Close() {
  if (closed_) return;
  closed_ = true;
  if (subscriber_ != 0) {
    hub_.RemoveSubscriber(subscriber_);
    subscriber_ = 0;
  }
  timer_.cancel();
  boost::system::error_code ignored;
  socket().close(ignored);
  queue_.clear();
  std::string().swap(writing_);
  if (auto closed = std::move(on_closed_)) closed();
}

void SubscriptionStream::PushUpdates(const engine::SubscriptionDelivery& delivery) {
  if (closed_ || finishing_) return;
  if (websocket()) {
    for (const engine::SubscriptionUpdate& update : delivery.updates()) {
      std::string message;
      AppendUpdateJson(update, &message);
      Queue(std::move(message));
    }
  } else {
    std::string events;
    for (const engine::SubscriptionUpdate& update : delivery.updates()) {
      events.append("data: ");
      AppendUpdateJson(update, &events);
      events.append("\n\n");
    }
    Queue(std::move(events));
  }
  const size_t limit = hub_.options().max_queued_bytes;
  if (queued_bytes() > limit) {
    // The client does not read: it could not read a reason either.
    spdlog::warn(
        "closing a subscriber on {}: over {} bytes of updates it has not read "
        "(subscriber-max-queued-bytes)",
        websocket() ? "a WebSocket" : "an event stream", limit);
    hub_.CountQueueLimitDisconnect();
    Close();
    return;
  }
  Write();
}

void SubscriptionStream::DropSubscriber(std::string reason) {
  subscriber_ = 0;  // the hub forgot it already
  Finish(std::move(reason));
}

void SubscriptionStream::Queue(std::string message) {
  queued_bytes_ += message.size();
  queue_.push_back(std::move(message));
}

void SubscriptionStream::Write() {
  if (!open_ || writing_now_ || closed_) return;
  if (queue_.empty()) {
    if (!finishing_) return;
    if (!websocket()) {
      boost::system::error_code ignored;
      socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
      Close();
      return;
    }
    writing_now_ = true;
    const websocket::close_reason reason(websocket::close_code::try_again_later,
                                         finish_reason_.substr(0, kMaxCloseReason));
    ws_->async_close(
        reason, [self = shared_from_this()](const boost::system::error_code&) { self->Close(); });
    return;
  }
  writing_now_ = true;
  if (websocket()) {
    writing_ = std::move(queue_.front());
    queue_.pop_front();
    writing_bytes_ = writing_.size();
    queued_bytes_ -= writing_bytes_;
    ws_->text(true);
    ws_->async_write(asio::buffer(writing_),
                     [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                       self->OnWrite(error);
                     });
    return;
  }
  writing_.clear();
  for (std::string& message : queue_) writing_.append(message);
  queue_.clear();
  writing_bytes_ = writing_.size();
  queued_bytes_ = 0;
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                      self->OnWrite(error);
                    });
}

void SubscriptionStream::OnWrite(const boost::system::error_code& error) {
  writing_now_ = false;
  writing_bytes_ = 0;
  if (closed_) return;
  if (error) {
    Close();
    return;
  }
  Write();
}

void SubscriptionStream::Finish(std::string reason) {
  if (finishing_ || closed_) return;
  finishing_ = true;
  finish_reason_ = reason;
  if (subscriber_ != 0) {
    hub_.RemoveSubscriber(subscriber_);
    subscriber_ = 0;
  }
  // Updates not written yet are dropped: the reason follows the write in progress.
  queue_.clear();
  queued_bytes_ = 0;
  if (websocket()) {
    Queue(ErrorJson(reason));
  } else {
    std::string event = "event: disconnect\ndata: ";
    event.append(ErrorJson(reason));
    event.append("\n\n");
    Queue(std::move(event));
  }
  timer_.expires_after(kGrace);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
    if (!error) self->Close();
  });
  Write();
}

void SubscriptionStream::Refuse(std::string_view status, std::string_view message) {
  if (subscriber_ != 0) {
    hub_.RemoveSubscriber(subscriber_);
    subscriber_ = 0;
  }
  const std::string body = ErrorJson(message);
  Queue(
      fmt::format("HTTP/1.1 {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
                  "Connection: close\r\n\r\n{}",
                  status, body.size(), body));
  open_ = true;
  finishing_ = true;  // closes once written
  timer_.expires_after(kGrace);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
    if (!error) self->Close();
  });
  Write();
}

void SubscriptionStream::ReadEvents() {
  // An event-stream client sends nothing more; reading tells when it goes away.
  socket_.async_read_some(
      read_buffer_.prepare(512),
      [self = shared_from_this()](const boost::system::error_code& error, size_t) {
        if (self->closed_) return;
        if (error) {
          self->Close();
          return;
        }
        self->ReadEvents();
      });
}

void SubscriptionStream::ReadWebSocket() {
  ws_->async_read(read_buffer_,
                  [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                    if (self->closed_) return;
                    if (error) {
                      self->Close();  // closed by the client, timed out, or a protocol error
                      return;
                    }
                    self->OnWebSocketMessage();
                    self->read_buffer_.consume(self->read_buffer_.size());
                    self->ReadWebSocket();
                  });
}

void SubscriptionStream::OnWebSocketMessage() {
  if (finishing_) return;
  auto request = ParseClientRequest(beast::buffers_to_string(read_buffer_.data()));
  if (!request) {
    Queue(ErrorJson(request.error().message));
    Write();
    return;
  }
  if (!request->subscribe) {
    hub_.Unsubscribe(subscriber_, request->keys, request->prefixes);
    return;
  }
  // As the route: only keys the user may read, every key under each prefix (ACL), the first
  // refused one logged in ACL LOG.
  if (const auth::User* user = restricted_to_.get()) {
    std::optional<std::string> refused;
    for (const std::string& key : request->keys) {
      if (!refused && !user->CanAccess(key, auth::kReadKey)) refused = key;
    }
    for (const std::string& prefix : request->prefixes) {
      if (!refused && !user->CanReadPrefix(prefix)) refused = prefix + "*";
    }
    if (refused) {
      if (log_refusal_) log_refusal_(std::move(*refused));
      Queue(ErrorJson("NOPERM No permissions to access a key"));
      Write();
      return;
    }
  }
  if (const Status status = hub_.Subscribe(subscriber_, request->keys, request->prefixes);
      !status) {
    if (status.error().code == ErrorCode::kInvalidArgument) {
      // Too many subscriptions: refused whole, the stream goes on with what it follows.
      Queue(ErrorJson(status.error().message));
      Write();
    } else {
      Finish(status.error().message);
    }
  }
}

void SubscriptionStream::KeepAlive() {
  timer_.expires_after(kKeepAlive);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
    if (error || self->closed_ || self->finishing_) return;
    if (!self->writing_now_ && self->queue_.empty()) {
      self->Queue(": keep-alive\n\n");
      self->Write();
    }
    self->KeepAlive();
  });
}

}  // namespace tally::http
