// The incremental Redis request parser: RESP multibulk ("*2\r\n$4\r\nINCR\r\n$1\r\nx\r\n")
// and inline commands ("INCR x\r\n", with sdssplitargs quoting), as redis-server reads them.
//
// Contract of Parse(): it looks at the bytes of one connection's input buffer from the
// start of the current (not yet consumed) request and answers
//   kComplete — one whole request was read: `args` holds its arguments (views into the
//               buffer, or into the parser's own storage for inline arguments that needed
//               unquoting), `consumed` how many bytes of the buffer it took. The views stay
//               valid until the next call of Parse() or Reset(), or until the buffer changes.
//   kNeedMore — the request is not whole yet; drop the first `consumed` bytes (non-zero only
//               when empty requests were skipped) and call again with the rest plus more.
//               The parser remembers how far it got, so a large request that arrives in
//               many pieces is scanned once, not once per piece.
//   kError    — the bytes are not a valid request, or exceed a limit: `error` holds
//               Redis's message (e.g. "Protocol error: invalid bulk length"). The
//               connection must be answered with it and closed; the parser is unusable
//               (every later call answers the same error) until Reset().
// An empty request — an inline line of nothing but blanks ("\r\n"), or a multibulk count
// of zero or less ("*0\r\n", "*-1\r\n") — is skipped: consumed grows, no request is
// returned (kNeedMore when nothing else follows).
//
// Where redis-server's answer depends on how the bytes happened to arrive, the parser picks
// one answer that does not: a line ("*"/"$" header or inline request) longer than
// max_inline_length is refused even when its end is already in the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tally::redis {

// Limits that keep one client from exhausting the server's memory.
struct ParserLimits {
  // Largest bulk string accepted ("$<n>"), like proto-max-bulk-len. Default 512 MiB.
  int64_t max_bulk_length = 512LL * 1024 * 1024;
  // Most arguments in one multibulk request ("*<n>"). Default 1,048,576.
  int64_t max_multibulk_length = int64_t{1024} * 1024;
  // Longest inline request line, like PROTO_INLINE_MAX_SIZE. Default 64 KiB.
  size_t max_inline_length = size_t{64} * 1024;
};

enum class ParseStatus { kComplete, kNeedMore, kError };

// One per connection; not thread-safe.
class RequestParser {
 public:
  explicit RequestParser(ParserLimits limits = {});

  // REQUIRES: after kNeedMore, `buffer` starts with the bytes of the previous call less the
  // `consumed` ones (more may follow); after kComplete, it starts at the next request.
  ParseStatus Parse(std::string_view buffer, size_t* consumed, std::vector<std::string_view>* args,
                    std::string* error);

  // Forgets any partial request and any error (after the caller consumed or dropped the
  // buffer).
  void Reset();

 private:
  enum class Kind { kNone, kMultibulk, kInline };
  enum class Step { kDone, kNeedMore, kError };

  // Where an argument lies: in the request's bytes, or in unquoted_.
  struct Span {
    size_t offset;
    size_t length;
    bool unquoted;
  };

  // Each reads the current request at the start of `request`. kDone sets *length to its
  // size in bytes and leaves its arguments in spans_ (none for an empty request).
  Step ParseMultibulk(std::string_view request, size_t* length);
  Step ParseInline(std::string_view request, size_t* length);
  // Appends the arguments of one inline line (CRLF removed) as sdssplitargs splits them.
  Step SplitInline(std::string_view line);
  // Finds the first `terminator` of the line that starts at `line_start`, resuming where the
  // last call for the same line stopped. kError (with the message `too_big`) when the line
  // is longer than max_inline_length.
  Step FindLineEnd(std::string_view request, size_t line_start, char terminator,
                   const char* too_big, size_t* end);
  // Reads the number of the line "*<count>" or "$<length>" that starts at `line_start` (its
  // first byte is not looked at): kDone, with the number (nullopt when the line holds no
  // integer) and its CR, once the line and the byte after the CR are there; else as
  // FindLineEnd.
  Step ReadLengthLine(std::string_view request, size_t line_start, const char* too_big,
                      std::optional<int64_t>* value, size_t* cr);
  Step Fail(std::string message);
  void StartRequest();

  ParserLimits limits_;
  Kind kind_ = Kind::kNone;  // what the current request is; kNone between requests
  // Progress through the current request, in bytes from its start.
  int64_t args_left_ = 0;     // arguments still to read after "*<n>", 0 before it
  int64_t bulk_length_ = -1;  // length from "$<n>" of the argument being read, -1 before it
  size_t position_ = 0;       // where the next unread line or bulk starts
  size_t scanned_ = 0;        // how far the current line was searched for its terminator
  std::vector<Span> spans_;   // arguments read so far; reused from request to request
  std::string unquoted_;      // inline arguments that needed unquoting, back to back
  std::string error_;         // the message once the parser failed, else empty
};

}  // namespace tally::redis
