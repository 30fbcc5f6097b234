#include "programs/verify/resp_client.h"

#include <fmt/core.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/tcp_connect.h"

namespace tally::verify {

std::optional<int64_t> Reply::AsInteger() const {
  if (kind == Kind::kInteger) return integer;
  if (kind != Kind::kBulk && kind != Kind::kSimple) return std::nullopt;
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

std::string Reply::Describe() const {
  switch (kind) {
    case Kind::kSimple:
      return text;
    case Kind::kError:
      return "error " + text;
    case Kind::kInteger:
      return std::to_string(integer);
    case Kind::kBulk:
      return fmt::format("\"{}\"", std::string_view(text).substr(0, 80));
    case Kind::kNil:
      return "nil";
    case Kind::kArray:
      return fmt::format("an array of {}", items.size());
  }
  return "?";
}

Status RespClient::Connect(const std::string& address, const Credentials& credentials,
                           std::chrono::milliseconds timeout,
                           std::chrono::milliseconds io_timeout) {
  address_ = address;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return InvalidArgument(fmt::format("--server '{}' must be host:port", address));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(colon + 1);
  auto fd = ConnectTcp(host, port, timeout, io_timeout);
  if (!fd) {
    return MakeError(ErrorCode::kUnavailable, fmt::format("cannot connect to tallyd at {}: {}",
                                                          address, fd.error().message));
  }
  fd_ = *fd;
  if (!credentials.password.empty()) {
    auto auth = credentials.user.empty() ? Call({"AUTH", credentials.password})
                                         : Call({"AUTH", credentials.user, credentials.password});
    if (!auth) return tl::unexpected(auth.error());
    if (auth->is_error()) {
      return InvalidArgument(fmt::format("tallyd at {}: AUTH: {}", address, auth->text));
    }
  }
  return OkStatus();
}

void RespClient::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  in_.clear();
  pos_ = 0;
}

Result<std::vector<Reply>> RespClient::Pipeline(
    const std::vector<std::vector<std::string>>& commands) {
  if (fd_ < 0) return tl::unexpected(Lost("not connected"));
  std::string out;
  for (const auto& args : commands) {
    out += fmt::format("*{}\r\n", args.size());
    for (const std::string& a : args) {
      out += fmt::format("${}\r\n", a.size());
      out += a;
      out += "\r\n";
    }
  }
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return tl::unexpected(Lost(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                                     ? "send timed out"
                                     : std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  std::vector<Reply> replies;
  for (size_t i = 0; i < commands.size(); ++i) {
    auto reply = ReadReply();
    if (!reply) return tl::unexpected(reply.error());
    replies.push_back(std::move(*reply));
  }
  return replies;
}

Result<Reply> RespClient::Call(const std::vector<std::string>& args) {
  auto replies = Pipeline({args});
  if (!replies) return tl::unexpected(replies.error());
  return std::move((*replies)[0]);
}

Result<Reply> RespClient::Check(const std::vector<std::string>& args) {
  auto reply = Call(args);
  if (reply && reply->is_error()) {
    return InvalidArgument(fmt::format("tallyd: {}: {}", args[0], reply->text));
  }
  return reply;
}

Error RespClient::Lost(const std::string& why) {
  Close();
  return Error{ErrorCode::kUnavailable,
               fmt::format("connection to tallyd at {} lost: {}", address_, why)};
}

Status RespClient::Fill() {
  if (pos_ > 0 && pos_ == in_.size()) {
    in_.clear();
    pos_ = 0;
  }
  char buffer[65536];
  for (;;) {
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return tl::unexpected(Lost("closed by the server"));
    if (n < 0) {
      return tl::unexpected(Lost(errno == EAGAIN || errno == EWOULDBLOCK ? "no reply in time"
                                                                         : std::strerror(errno)));
    }
    in_.append(buffer, static_cast<size_t>(n));
    return OkStatus();
  }
}

Result<std::string> RespClient::ReadLine() {
  for (;;) {
    const size_t end = in_.find("\r\n", pos_);
    if (end != std::string::npos) {
      std::string line = in_.substr(pos_, end - pos_);
      pos_ = end + 2;
      return line;
    }
    if (auto filled = Fill(); !filled) return tl::unexpected(filled.error());
  }
}

Result<int64_t> RespClient::ParseLength(const std::string& line) {
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(line.data() + 1, line.data() + line.size(), n);
  if (ec != std::errc() || ptr != line.data() + line.size()) {
    return tl::unexpected(Lost("bad reply '" + line + "'"));
  }
  return n;
}

Result<Reply> RespClient::ReadReply() {
  auto line = ReadLine();
  if (!line) return tl::unexpected(line.error());
  if (line->empty()) return tl::unexpected(Lost("an empty reply line"));
  Reply r;
  switch ((*line)[0]) {
    case '+':
      r.kind = Reply::Kind::kSimple;
      r.text = line->substr(1);
      return r;
    case '-':
      r.kind = Reply::Kind::kError;
      r.text = line->substr(1);
      return r;
    case ':': {
      auto n = ParseLength(*line);
      if (!n) return tl::unexpected(n.error());
      r.kind = Reply::Kind::kInteger;
      r.integer = *n;
      return r;
    }
    case '_':
      return r;
    case '$': {
      auto n = ParseLength(*line);
      if (!n) return tl::unexpected(n.error());
      if (*n < 0) return r;
      const auto size = static_cast<size_t>(*n);
      while (in_.size() - pos_ < size + 2) {
        if (auto filled = Fill(); !filled) return tl::unexpected(filled.error());
      }
      r.kind = Reply::Kind::kBulk;
      r.text = in_.substr(pos_, size);
      pos_ += size + 2;
      return r;
    }
    case '*':
    case '%': {
      auto n = ParseLength(*line);
      if (!n) return tl::unexpected(n.error());
      if (*n < 0) return r;
      const int64_t count = (*line)[0] == '%' ? *n * 2 : *n;
      r.kind = Reply::Kind::kArray;
      r.items.reserve(
          static_cast<size_t>(std::min<int64_t>(count, 1024)));  // a bad length: no huge allocation
      for (int64_t i = 0; i < count; ++i) {
        auto item = ReadReply();
        if (!item) return tl::unexpected(item.error());
        r.items.push_back(std::move(*item));
      }
      return r;
    }
    default:
      return tl::unexpected(Lost("unexpected reply '" + line->substr(0, 40) + "'"));
  }
}

}  // namespace tally::verify
