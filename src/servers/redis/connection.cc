#include "servers/redis/connection.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "servers/redis/worker.h"
#include "servers/subscription_sink.h"

namespace tally::redis {
namespace {

constexpr size_t kReadChunk = size_t{16} * 1024;
// Read at most this much per turn from one client, so that one fast client cannot starve
// the others of the same worker.
constexpr size_t kMaxReadPerTurn = size_t{1024} * 1024;

ParserLimits LimitsOf(const ServerOptions& options) {
  ParserLimits limits;
  limits.max_bulk_length = options.proto_max_bulk_len;
  limits.max_multibulk_length = options.max_multibulk_length;
  return limits;
}

}  // namespace

Connection::Connection(Worker& worker, boost::asio::ip::tcp::socket socket,
                       const servers::Peer& peer)
    : worker_(worker), parser_(LimitsOf(worker.core().options())) {
  boost::system::error_code ignored;
  socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);  // fails on a TLS tunnel's
  boost::system::error_code released;
  fd_ = socket.release(released);
  if (released) fd_ = -1;
  // Set here rather than trusted from Asio, which set it for its own use.
  if (fd_ >= 0) ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  ServerCore& core = worker.core();
  auto info =
      core.clients().Add(servers::FormatEndpoint(peer.remote), servers::FormatEndpoint(peer.local),
                         fd_, core.engine().keyspace().clock()->NowMillis());
  session_ = std::make_unique<Session>(core, worker.shard(), std::move(info));
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

void Connection::Start() {
  session_->set_sink_factory([self = weak_from_this(), &loop = worker_.loop()] {
    return std::make_shared<servers::PostingSink<Connection>>(
        [&loop](std::function<void()> work) { loop.Post(std::move(work)); }, self);
  });
  Status added =
      fd_ < 0 ? IOError("the socket could not be taken from Asio") : worker_.loop().Add(fd_, id());
  if (!added) {
    spdlog::error("closing client {}: {}", session_->info().address, added.error().message);
    Close();
  }
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  // Closing the descriptor also takes it out of the loop's epoll set.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  session_->EndSubscriptions();
  worker_.core().clients().Remove(session_->info().id);
  worker_.Forget(id());
}

void Connection::OnReady(uint32_t events) {
  if (closed_) return;
  if ((events & EPOLLOUT) != 0 && write_waiting_) {
    write_waiting_ = false;
    TryWrite();
    if (closed_) return;
    if (!write_waiting_) UpdateWatch();
  }
  if (!reading_stopped_) {
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) OnReadable();
  } else if ((events & (EPOLLHUP | EPOLLERR)) != 0) {
    // Reading had stopped and the socket is gone: nothing more can be sent either.
    Close();
  }
}

void Connection::MakeRoomToRead() {
  // Everything read was consumed (the usual case): start over at the front, moving nothing.
  if (input_start_ == input_end_) input_start_ = input_end_ = 0;
  if (input_.size() - input_end_ >= kReadChunk) return;
  // Move the unconsumed bytes to the front first (only those: the string's whole size is
  // read room), and grow only when the request needs it.
  if (input_start_ > 0) {
    std::memmove(input_.data(), input_.data() + input_start_, input_end_ - input_start_);
    input_end_ -= input_start_;
    input_start_ = 0;
  }
  if (input_.size() - input_end_ < kReadChunk) input_.resize(input_end_ + kReadChunk);
}

void Connection::OnReadable() {
  size_t read_this_turn = 0;
  bool peer_closed = false;
  const int64_t query_limit = worker_.core().options().client_query_buffer_limit;
  for (;;) {
    MakeRoomToRead();
    const size_t room = input_.size() - input_end_;
    const ssize_t n = ::recv(fd_, input_.data() + input_end_, room, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) peer_closed = true;
      break;
    }
    if (n == 0) {
      peer_closed = true;
      break;
    }
    input_end_ += static_cast<size_t>(n);
    read_this_turn += static_cast<size_t>(n);
    // A short read emptied the socket. Whatever arrives later, or stays because this turn's
    // share was used, the level-triggered loop reports it again: no read that would only
    // answer "would block".
    if (static_cast<size_t>(n) < room) break;
    if (read_this_turn >= kMaxReadPerTurn) break;
    if (static_cast<int64_t>(input_end_ - input_start_) > query_limit) break;
  }
  WorkerStats::Bump(worker_.stats().net_input_bytes, read_this_turn);
  const int64_t now_ms = worker_.core().engine().keyspace().clock()->NowMillis();
  session_->info().last_interaction_ms.store(now_ms, std::memory_order_relaxed);

  worker_.Touch(shared_from_this());
  const uint64_t requests_before = requests_run_;
  const bool keep_reading = RunRequests();
  // A slow-loris's clock runs from its request's first byte; a byte now and then does not
  // reset it, a whole request does.
  if (input_start_ == input_end_) {
    partial_request_since_ms_ = 0;
  } else if (partial_request_since_ms_ == 0 || requests_run_ != requests_before) {
    partial_request_since_ms_ = now_ms;
  }
  if (static_cast<int64_t>(input_end_ - input_start_) > query_limit) {
    spdlog::warn("closing client {}: query buffer over {} bytes", session_->info().address,
                 query_limit);
    Close();
    return;
  }
  const int64_t output_limit = worker_.core().options().client_output_buffer_limit;
  if (static_cast<int64_t>(session_->output().size() - output_sent_) > output_limit) {
    WorkerStats::Bump(worker_.stats().output_limit_disconnects);
    spdlog::warn("closing client {}: output buffer over {} bytes (it does not read its replies)",
                 session_->info().address, output_limit);
    Close();
    return;
  }
  session_->info().query_buffer_bytes.store(input_end_ - input_start_, std::memory_order_relaxed);
  if (peer_closed) {
    // Nothing more will come; whatever whole requests arrived have run. A half request is
    // dropped, as the client never finished sending it.
    StopReading();
    if (!closed_ && session_->output().size() == output_sent_) Close();
    return;
  }
  if (!keep_reading) {
    StopReading();
    return;
  }
  if (input_start_ == input_end_ && input_.capacity() > size_t{64} * 1024) {
    // A burst is over: give back the large buffer so idle clients stay cheap.
    std::string().swap(input_);
    input_start_ = input_end_ = 0;
  }
}

void Connection::StopReading() {
  if (reading_stopped_) return;
  reading_stopped_ = true;
  // Level-triggered, a socket at its end would be reported readable on every turn.
  UpdateWatch();
}

void Connection::UpdateWatch() {
  if (closed_) return;
  if (Status watched = worker_.loop().Watch(fd_, id(), !reading_stopped_, write_waiting_);
      !watched) {
    spdlog::error("closing client {}: {}", session_->info().address, watched.error().message);
    Close();
  }
}

bool Connection::RunRequests() {
  while (input_start_ < input_end_) {
    size_t consumed = 0;
    std::string error;
    const std::string_view pending(input_.data() + input_start_, input_end_ - input_start_);
    const ParseStatus status = parser_.Parse(pending, &consumed, &args_, &error);
    if (status == ParseStatus::kNeedMore) {
      input_start_ += consumed;
      return true;
    }
    if (status == ParseStatus::kError) {
      WorkerStats::Bump(worker_.stats().protocol_errors);
      session_->ProtocolError(error);
      return false;
    }
    input_start_ += consumed;
    if (args_.empty()) continue;
    ++requests_run_;
    session_->Execute(args_);
    if (session_->close_requested()) return false;
  }
  return true;
}

template <typename Write>
void Connection::AppendUnrequested(Write&& write) {
  std::string& output = session_->output();
  const bool released = output_ready_ == output.size() && !session_->has_holes();
  write();
  if (released) output_ready_ = output.size();
}

void Connection::PushUpdates(const engine::SubscriptionDelivery& delivery) {
  if (closed_) return;
  AppendUnrequested([&] { session_->PushUpdates(delivery); });
  engine::SubscriptionHub& hub = *worker_.core().subscriptions();
  const size_t limit = hub.options().max_queued_bytes;
  if (session_->output().size() - output_sent_ > limit) {
    hub.CountQueueLimitDisconnect();
    spdlog::warn(
        "closing subscriber {}: over {} bytes of messages it has not read "
        "(subscriber-max-queued-bytes)",
        session_->info().address, limit);
    Close();
    return;
  }
  TryWrite();
}

void Connection::DropSubscriber(std::string reason) {
  if (closed_) return;
  spdlog::warn("closing subscriber {}: {}", session_->info().address, reason);
  AppendUnrequested([&] {
    ReplyWriter(&session_->output(), session_->protocol()).Error("ERR disconnected: " + reason);
  });
  // One attempt to send the reason, then close: the client is not keeping up.
  TryWrite();
  Close();
}

void Connection::TimeOutRequest(int64_t seconds) {
  if (closed_) return;
  spdlog::warn("closing client {}: a request not received whole within {} s (request-timeout)",
               session_->info().address, seconds);
  AppendUnrequested([&] {
    ReplyWriter(&session_->output(), session_->protocol())
        .Error(fmt::format("ERR request timeout: the request did not arrive whole within {} s",
                           seconds));
  });
  // One attempt to send the reason, then close: the client is not sending its request.
  TryWrite();
  Close();
}

void Connection::ReleaseReplies() {
  output_ready_ = session_->output().size();
  TryWrite();
}

void Connection::TryWrite() {
  if (closed_ || write_waiting_) return;
  std::string& output = session_->output();
  while (output_sent_ < output_ready_) {
    const ssize_t n =
        ::send(fd_, output.data() + output_sent_, output_ready_ - output_sent_, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        WaitWritable();
        return;
      }
      Close();
      return;
    }
    output_sent_ += static_cast<size_t>(n);
    WorkerStats::Bump(worker_.stats().net_output_bytes, static_cast<uint64_t>(n));
  }
  CompactOutput();
  session_->info().output_buffer_bytes.store(output.size() - output_sent_,
                                             std::memory_order_relaxed);
  if (reading_stopped_ && output_sent_ == output.size()) Close();
}

void Connection::WaitWritable() {
  write_waiting_ = true;
  UpdateWatch();
}

void Connection::CompactOutput() {
  // Holes hold offsets into the output: move nothing while any is open.
  std::string& output = session_->output();
  if (output_sent_ == output.size() && !session_->has_holes()) {
    output.clear();
    output_sent_ = output_ready_ = 0;
    if (output.capacity() > size_t{1024} * 1024) std::string().swap(output);
  }
}

}  // namespace tally::redis
