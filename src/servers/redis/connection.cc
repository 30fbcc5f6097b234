#include "servers/redis/connection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <cstring>

#include "servers/redis/worker.h"
#include "servers/subscription_sink.h"

namespace tally::redis {
namespace {

constexpr size_t kReadChunk = size_t{16} * 1024;
// Read at most this much per turn from one client, so that one fast client cannot starve
// the others of the same worker.
constexpr size_t kMaxReadPerTurn = size_t{1024} * 1024;

std::string Endpoint(const boost::asio::ip::tcp::endpoint& endpoint) {
  return fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
}

ParserLimits LimitsOf(const ServerOptions& options) {
  ParserLimits limits;
  limits.max_bulk_length = options.proto_max_bulk_len;
  limits.max_multibulk_length = options.max_multibulk_length;
  return limits;
}

}  // namespace

Connection::Connection(Worker& worker, boost::asio::ip::tcp::socket socket)
    : worker_(worker), socket_(std::move(socket)), parser_(LimitsOf(worker.core().options())) {
  boost::system::error_code ignored;
  socket_.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
  socket_.non_blocking(true, ignored);
  const auto remote = socket_.remote_endpoint(ignored);
  const auto local = socket_.local_endpoint(ignored);
  ServerCore& core = worker.core();
  auto info = core.clients().Add(Endpoint(remote), Endpoint(local), socket_.native_handle(),
                                 core.engine().keyspace().clock()->NowMillis());
  session_ = std::make_unique<Session>(core, worker.shard(), std::move(info));
}

Connection::~Connection() = default;

void Connection::Start() {
  session_->set_sink_factory([self = weak_from_this(), executor = socket_.get_executor()] {
    return std::make_shared<servers::PostingSink<Connection>>(executor, self);
  });
  WaitReadable();
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  session_->EndSubscriptions();
  worker_.core().clients().Remove(session_->info().id);
  worker_.Forget(this);
}

void Connection::WaitReadable() {
  MakeRoomToRead();
  socket_.async_read_some(
      boost::asio::buffer(input_.data() + input_end_, input_.size() - input_end_),
      [self = shared_from_this()](const boost::system::error_code& error, size_t bytes) {
        if (error == boost::asio::error::operation_aborted || self->closed_) return;
        self->OnReadable(ReadResult{error, bytes});
      });
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

void Connection::OnReadable(std::optional<ReadResult> first) {
  size_t read_this_turn = 0;
  bool peer_closed = false;
  bool drained = false;  // the socket had nothing more to give when last read
  const int64_t query_limit = worker_.core().options().client_query_buffer_limit;
  for (;;) {
    ReadResult read;
    if (first) {
      read = *first;  // into the room WaitReadable made, untouched since
      first.reset();
    } else {
      MakeRoomToRead();
      read.bytes = socket_.read_some(
          boost::asio::buffer(input_.data() + input_end_, input_.size() - input_end_), read.error);
    }
    if (read.error == boost::asio::error::would_block) {
      drained = true;
      break;
    }
    if (read.error) {
      peer_closed = true;
      break;
    }
    const bool short_read = read.bytes < input_.size() - input_end_;
    input_end_ += read.bytes;
    read_this_turn += read.bytes;
    // A short read emptied the socket: whatever arrives next raises a new readiness event,
    // so the read that would only answer "would block" is skipped (one system call less
    // per request at pipeline depth 1).
    if (short_read) {
      drained = true;
      break;
    }
    if (read_this_turn >= kMaxReadPerTurn) break;
    if (static_cast<int64_t>(input_end_ - input_start_) > query_limit) break;
  }
  WorkerStats::Bump(worker_.stats().net_input_bytes, read_this_turn);
  session_->info().last_interaction_ms.store(
      worker_.core().engine().keyspace().clock()->NowMillis(), std::memory_order_relaxed);

  worker_.Touch(shared_from_this());
  const bool keep_reading = RunRequests();
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
    reading_stopped_ = true;
    if (session_->output().size() == output_sent_) Close();
    return;
  }
  if (!keep_reading) {
    reading_stopped_ = true;
    return;
  }
  if (input_start_ == input_end_ && input_.capacity() > size_t{64} * 1024) {
    // A burst is over: give back the large buffer so idle clients stay cheap.
    std::string().swap(input_);
    input_start_ = input_end_ = 0;
  }
  if (drained) {
    WaitReadable();
  } else {
    // Bytes are still waiting in the socket, and readiness is edge-triggered: no new event
    // would come for them. Continue in a later turn, after the other clients had theirs.
    boost::asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (!self->closed_) self->OnReadable(std::nullopt);
    });
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

void Connection::ReleaseReplies() {
  output_ready_ = session_->output().size();
  TryWrite();
}

void Connection::TryWrite() {
  if (closed_ || write_waiting_) return;
  std::string& output = session_->output();
  while (output_sent_ < output_ready_) {
    boost::system::error_code error;
    const size_t n = socket_.write_some(
        boost::asio::buffer(output.data() + output_sent_, output_ready_ - output_sent_), error);
    if (error == boost::asio::error::would_block) {
      WaitWritable();
      return;
    }
    if (error) {
      Close();
      return;
    }
    output_sent_ += n;
    WorkerStats::Bump(worker_.stats().net_output_bytes, n);
  }
  CompactOutput();
  session_->info().output_buffer_bytes.store(output.size() - output_sent_,
                                             std::memory_order_relaxed);
  if (reading_stopped_ && output_sent_ == output.size()) Close();
}

void Connection::WaitWritable() {
  write_waiting_ = true;
  socket_.async_wait(boost::asio::ip::tcp::socket::wait_write,
                     [self = shared_from_this()](const boost::system::error_code& error) {
                       self->write_waiting_ = false;
                       if (error || self->closed_) return;
                       self->TryWrite();
                     });
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
