// What a Redis client may send, as redis-server 7.0 reads it (networking.c):
//
//   request   := multibulk | inline
//   multibulk := '*' count CR any (bulk){count}    -- count <= 0: an empty request
//   bulk      := '$' length CR any bytes{length} any any
//   inline    := line LF                            -- a line that does not start with '*'
//   count, length := Redis integers: '-'? digits, no '+', no leading zeros, within int64
//
// Redis finds a header line by its CR and skips the byte after it unchecked, and skips the
// two bytes after a bulk's payload unchecked too; so does this parser, so that it accepts
// exactly what redis-server accepts. An inline line drops one CR before its LF and is split
// into arguments like sdssplitargs (see SplitInline).
#include "servers/redis/resp_parser.h"

#include <cassert>
#include <cstring>
#include <optional>
#include <utility>

#include "core/integer.h"

namespace tally::redis {
namespace {

constexpr char kTooBigInline[] = "Protocol error: too big inline request";
constexpr char kTooBigCount[] = "Protocol error: too big mbulk count string";
constexpr char kTooBigLength[] = "Protocol error: too big bulk count string";
constexpr char kInvalidCount[] = "Protocol error: invalid multibulk length";
constexpr char kInvalidLength[] = "Protocol error: invalid bulk length";
constexpr char kUnbalancedQuotes[] = "Protocol error: unbalanced quotes in request";

// isspace() in the C locale, which is what Redis runs under: blanks between arguments.
bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// What ends an unquoted argument. Narrower than IsBlank because sdssplitargs tests these
// characters by name, so "a\vb" is one argument.
bool EndsWord(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The byte that a backslash and `c` stand for inside double quotes.
char Unescape(char c) {
  switch (c) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'b':
      return '\b';
    case 'a':
      return '\a';
    default:
      return c;
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

RequestParser::RequestParser(ParserLimits limits) : limits_(limits) {}

void RequestParser::Reset() {
  StartRequest();
  error_.clear();
}

void RequestParser::StartRequest() {
  kind_ = Kind::kNone;
  args_left_ = 0;
  bulk_length_ = -1;
  position_ = 0;
  scanned_ = 0;
  spans_.clear();
}

RequestParser::Step RequestParser::Fail(std::string message) {
  error_ = std::move(message);
  return Step::kError;
}

ParseStatus RequestParser::Parse(std::string_view buffer, size_t* consumed,
                                 std::vector<std::string_view>* args, std::string* error) {
  args->clear();
  *consumed = 0;
  if (!error_.empty()) {
    *error = error_;
    return ParseStatus::kError;
  }
  // Empty requests are skipped here, so one call may pass several before it returns.
  size_t start = 0;
  while (true) {
    const std::string_view request = buffer.substr(start);
    assert(position_ <= request.size());
    if (kind_ == Kind::kNone) {
      if (request.empty()) break;
      kind_ = request[0] == '*' ? Kind::kMultibulk : Kind::kInline;
    }
    size_t length = 0;
    const Step step = kind_ == Kind::kMultibulk ? ParseMultibulk(request, &length)
                                                : ParseInline(request, &length);
    if (step == Step::kNeedMore) break;
    if (step == Step::kError) {
      *error = error_;
      return ParseStatus::kError;
    }
    start += length;
    if (!spans_.empty()) {
      args->reserve(spans_.size());
      for (const Span& span : spans_) {
        const char* base = span.unquoted ? unquoted_.data() : request.data();
        args->emplace_back(base + span.offset, span.length);
      }
      StartRequest();
      *consumed = start;
      return ParseStatus::kComplete;
    }
    StartRequest();
  }
  // The partial request's offsets are relative to `start`, where the caller's next buffer
  // begins.
  *consumed = start;
  return ParseStatus::kNeedMore;
}

RequestParser::Step RequestParser::FindLineEnd(std::string_view request, size_t line_start,
                                               char terminator, const char* too_big, size_t* end) {
  // Only the first max_inline_length + 1 bytes of a line are ever searched: if the
  // terminator is not among them the line is too long, wherever the terminator is.
  const size_t available = request.size() - line_start;
  const size_t window =
      available <= limits_.max_inline_length ? available : limits_.max_inline_length + 1;
  const size_t from = scanned_ > line_start ? scanned_ : line_start;
  const size_t limit = line_start + window;
  const void* found =
      from < limit ? std::memchr(request.data() + from, terminator, limit - from) : nullptr;
  if (found == nullptr) {
    scanned_ = limit;
    if (window > limits_.max_inline_length) return Fail(too_big);
    return Step::kNeedMore;
  }
  *end = static_cast<const char*>(found) - request.data();
  scanned_ = *end;
  return Step::kDone;
}

RequestParser::Step RequestParser::ReadLengthLine(std::string_view request, size_t line_start,
                                                  const char* too_big,
                                                  std::optional<int64_t>* value, size_t* cr) {
  // Nearly every count and length is a few digits ("*3", "$5"): read them at once instead of
  // searching for the CR and parsing the line apart (a quarter of the instructions of a small
  // request, by callgrind).
  // Only what the general path below would read the same way is taken here: 1 to 4 digits
  // without a leading zero, then the CR, within max_inline_length, with a byte after it.
  constexpr size_t kShortDigits = 4;
  const size_t first = line_start + 1;
  size_t end = first;
  int64_t number = 0;
  while (end < request.size() && end - first < kShortDigits && request[end] >= '0' &&
         request[end] <= '9') {
    number = number * 10 + (request[end] - '0');
    ++end;
  }
  if (end > first && request[first] != '0' && end + 1 < request.size() && request[end] == '\r' &&
      end - line_start <= limits_.max_inline_length) {
    *value = number;
    *cr = end;
    scanned_ = end;
    return Step::kDone;
  }
  const Step step = FindLineEnd(request, line_start, '\r', too_big, cr);
  if (step != Step::kDone) return step;
  // Redis steps over the byte after CR without looking at it, but waits for it.
  if (*cr + 1 >= request.size()) return Step::kNeedMore;
  *value = ParseInt64(request.substr(first, *cr - first));
  return Step::kDone;
}

RequestParser::Step RequestParser::ParseMultibulk(std::string_view request, size_t* length) {
  if (args_left_ == 0) {
    size_t cr;
    std::optional<int64_t> count;
    const Step step = ReadLengthLine(request, 0, kTooBigCount, &count, &cr);
    if (step != Step::kDone) return step;
    if (!count || *count > limits_.max_multibulk_length) return Fail(kInvalidCount);
    position_ = cr + 2;
    if (*count <= 0) {
      *length = position_;
      return Step::kDone;
    }
    args_left_ = *count;
  }
  while (args_left_ > 0) {
    if (bulk_length_ < 0) {
      size_t cr;
      std::optional<int64_t> bulk_length;
      const Step step = ReadLengthLine(request, position_, kTooBigLength, &bulk_length, &cr);
      if (step != Step::kDone) return step;
      const char type = request[position_];
      if (type != '$') {
        // An error line cannot hold CR or LF; Redis prints them as spaces.
        const char shown = type == '\r' || type == '\n' ? ' ' : type;
        return Fail(std::string("Protocol error: expected '$', got '") + shown + "'");
      }
      if (!bulk_length || *bulk_length < 0 || *bulk_length > limits_.max_bulk_length) {
        return Fail(kInvalidLength);
      }
      bulk_length_ = *bulk_length;
      position_ = cr + 2;
    }
    // Waiting for a large payload costs a comparison per call: its bytes are not scanned.
    const size_t needed = static_cast<size_t>(bulk_length_) + 2;
    if (request.size() - position_ < needed) return Step::kNeedMore;
    spans_.push_back({position_, static_cast<size_t>(bulk_length_), false});
    position_ += needed;
    scanned_ = position_;
    bulk_length_ = -1;
    --args_left_;
  }
  *length = position_;
  return Step::kDone;
}

RequestParser::Step RequestParser::ParseInline(std::string_view request, size_t* length) {
  size_t lf;
  const Step step = FindLineEnd(request, 0, '\n', kTooBigInline, &lf);
  if (step != Step::kDone) return step;
  std::string_view line = request.substr(0, lf);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  unquoted_.clear();
  if (SplitInline(line) == Step::kError) return Step::kError;
  *length = lf + 1;
  return Step::kDone;
}

// sdssplitargs, byte for byte, except that NUL is an ordinary byte here (Redis never gets
// this far with a NUL in the line: it looks for LF with strchr and waits forever):
//   - blanks (isspace) separate arguments; an unquoted argument ends at space, tab, CR, LF;
//   - a quote, even in the middle of an argument, starts a quoted part that ends the
//     argument; its closing quote must be followed by a blank or the end of the line;
//   - in "double quotes": \xHH (two hex digits) is that byte, \n \r \t \b \a are controls,
//     a backslash before any other byte is that byte;
//   - in 'single quotes': only \' is an escape;
//   - a missing closing quote is an error.
// Arguments that are a plain run of bytes, or a quoted part without escapes, are views into
// the line (the line starts the request, so offsets in it are offsets in the request);
// others are unescaped into unquoted_.
RequestParser::Step RequestParser::SplitInline(std::string_view line) {
  const size_t n = line.size();
  size_t i = 0;
  while (true) {
    while (i < n && IsBlank(line[i])) ++i;
    if (i == n) return Step::kDone;
    const size_t word_start = i;
    while (i < n && !EndsWord(line[i]) && line[i] != '"' && line[i] != '\'') ++i;
    if (i == n || EndsWord(line[i])) {
      spans_.push_back({word_start, i - word_start, false});
      continue;  // the blank that ended the word is skipped with the next ones
    }
    const char quote = line[i];
    const size_t content_start = ++i;
    // The common case: a quoted argument with nothing before it and no escape inside.
    size_t close = content_start;
    while (close < n && line[close] != quote && line[close] != '\\') ++close;
    if (word_start + 1 == content_start && close < n && line[close] == quote) {
      if (close + 1 < n && !IsBlank(line[close + 1])) return Fail(kUnbalancedQuotes);
      spans_.push_back({content_start, close - content_start, false});
      i = close + 1;
      continue;
    }
    const size_t offset = unquoted_.size();
    unquoted_.append(line.substr(word_start, content_start - 1 - word_start));
    while (true) {
      if (i == n) return Fail(kUnbalancedQuotes);
      const char c = line[i];
      if (c == quote) {
        if (i + 1 < n && !IsBlank(line[i + 1])) return Fail(kUnbalancedQuotes);
        ++i;
        break;
      }
      if (c != '\\' || i + 1 == n) {
        unquoted_.push_back(c);
        ++i;
        continue;
      }
      const char next = line[i + 1];
      if (quote == '\'') {
        if (next == '\'') {
          unquoted_.push_back('\'');
          i += 2;
        } else {
          unquoted_.push_back(c);
          ++i;
        }
        continue;
      }
      if (next == 'x' && i + 3 < n && HexValue(line[i + 2]) >= 0 && HexValue(line[i + 3]) >= 0) {
        unquoted_.push_back(static_cast<char>(HexValue(line[i + 2]) * 16 + HexValue(line[i + 3])));
        i += 4;
        continue;
      }
      unquoted_.push_back(Unescape(next));
      i += 2;
    }
    spans_.push_back({offset, unquoted_.size() - offset, true});
  }
}

}  // namespace tally::redis
