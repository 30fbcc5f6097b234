// The incremental Redis request parser: RESP multibulk ("*2\r\n$4\r\nINCR\r\n$1\r\nx\r\n")
// and inline commands ("INCR x\r\n", with sdssplitargs quoting), as redis-server reads them.
//
// Contract of Parse(): it looks at the bytes of one connection's input buffer from the
// start of the current (not yet consumed) request and answers
//   kComplete — one whole request was read: `args` holds its arguments (views into the
//               buffer, or into the parser's own storage for inline arguments that needed
//               unquoting), `consumed` how many bytes of the buffer it took. The views stay
//               valid until the next call of Parse() or Reset(), or until the buffer changes.
//   kNeedMore — the request is not whole yet; call again with the same bytes plus more.
//               The parser remembers how far it got, so a large request that arrives in
//               many pieces is scanned once, not once per piece.
//   kError    — the bytes are not a valid request, or exceed a limit: `error` holds
//               Redis's message (e.g. "Protocol error: invalid bulk length"). The
//               connection must be answered with it and closed; the parser is unusable.
// An empty inline line ("\r\n") is skipped: consumed grows, no request is returned
// (kNeedMore when nothing else follows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tally::redis {

// Limits that keep one client from exhausting the server's memory.
struct ParserLimits {
  // Largest bulk string accepted ("$<n>"), like proto-max-bulk-len. Default 512 MiB.
  int64_t max_bulk_length = 512LL * 1024 * 1024;
  // Most arguments in one multibulk request ("*<n>"). Default 1,048,576.
  int64_t max_multibulk_length = 1024 * 1024;
  // Longest inline request line, like PROTO_INLINE_MAX_SIZE. Default 64 KiB.
  size_t max_inline_length = 64 * 1024;
};

enum class ParseStatus { kComplete, kNeedMore, kError };

// One per connection; not thread-safe.
class RequestParser {
 public:
  explicit RequestParser(ParserLimits limits = {});

  ParseStatus Parse(std::string_view buffer, size_t* consumed, std::vector<std::string_view>* args,
                    std::string* error);

  // Forgets any partial request (after the caller consumed or dropped the buffer).
  void Reset();

 private:
  // Parse state for a multibulk request that is not whole yet.
  ParserLimits limits_;
  int64_t expected_args_ = 0;      // from "*<n>", 0 when not inside a multibulk
  size_t position_ = 0;            // bytes of the current request already scanned
  std::vector<std::string_view> pending_args_;  // arguments read so far (as offsets)
  std::vector<std::pair<size_t, size_t>> pending_offsets_;
  std::vector<std::string> inline_storage_;  // unquoted inline arguments
};

}  // namespace tally::redis
