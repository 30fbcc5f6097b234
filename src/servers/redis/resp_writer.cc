#include "servers/redis/resp_writer.h"

#include "core/integer.h"

namespace tally::redis {

void ReplyWriter::Header(char type, int64_t count) {
  char buf[24];
  buf[0] = type;
  const int n = FormatInt64(count, buf + 1);
  buf[n + 1] = '\r';
  buf[n + 2] = '\n';
  out_->append(buf, n + 3);
}

void ReplyWriter::SimpleString(std::string_view text) {
  out_->push_back('+');
  out_->append(text);
  out_->append("\r\n", 2);
}

void ErrorTally::Count(std::string_view message) {
  std::string_view kind = message.substr(0, message.find(' '));
  const bool word = !kind.empty() && kind.size() <= kMaxKindLength &&
                    kind.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == std::string_view::npos;
  if (!word) kind = "ERR";
  std::lock_guard lock(mutex_);
  auto it = counts_.find(kind);
  if (it == counts_.end()) it = counts_.emplace(std::string(kind), 0).first;
  ++it->second;
}

std::vector<std::pair<std::string, uint64_t>> ErrorTally::Snapshot() const {
  std::lock_guard lock(mutex_);
  return {counts_.begin(), counts_.end()};
}

void ReplyWriter::Error(std::string_view message) {
  if (errors_ != nullptr) errors_->Count(message);
  out_->push_back('-');
  // A reply line cannot hold CR or LF; Redis replaces them with spaces too.
  for (char c : message) out_->push_back(c == '\r' || c == '\n' ? ' ' : c);
  out_->append("\r\n", 2);
}

void ReplyWriter::Integer(int64_t value) { Header(':', value); }

void ReplyWriter::Bulk(std::string_view bytes) {
  Header('$', static_cast<int64_t>(bytes.size()));
  out_->append(bytes);
  out_->append("\r\n", 2);
}

void ReplyWriter::BulkInteger(int64_t value) {
  char digits[24];
  const int n = FormatInt64(value, digits);
  Bulk(std::string_view(digits, n));
}

void ReplyWriter::Null() {
  if (protocol_ >= 3) {
    out_->append("_\r\n", 3);
  } else {
    out_->append("$-1\r\n", 5);
  }
}

void ReplyWriter::NullArray() {
  if (protocol_ >= 3) {
    out_->append("_\r\n", 3);
  } else {
    out_->append("*-1\r\n", 5);
  }
}

void ReplyWriter::ArrayHeader(size_t count) { Header('*', static_cast<int64_t>(count)); }

void ReplyWriter::MapHeader(size_t pairs) {
  if (protocol_ >= 3) {
    Header('%', static_cast<int64_t>(pairs));
  } else {
    Header('*', static_cast<int64_t>(pairs * 2));
  }
}

void ReplyWriter::PushHeader(size_t count) {
  Header(protocol_ >= 3 ? '>' : '*', static_cast<int64_t>(count));
}

void ReplyWriter::SetHeader(size_t count) {
  Header(protocol_ >= 3 ? '~' : '*', static_cast<int64_t>(count));
}

void ReplyWriter::Verbatim(std::string_view text) {
  if (protocol_ >= 3) {
    Header('=', static_cast<int64_t>(text.size() + 4));
    out_->append("txt:", 4);
    out_->append(text);
    out_->append("\r\n", 2);
  } else {
    Bulk(text);
  }
}

}  // namespace tally::redis
