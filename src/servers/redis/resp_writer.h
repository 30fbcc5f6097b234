// Serialises replies in RESP2 or RESP3 into a connection's output bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tally::redis {

// Error replies counted by kind, the first word of the message (ERR, WRONGTYPE, NOAUTH,
// EXECABORT, ...), as Redis's INFO errorstats. One per worker: its thread counts, any
// thread reads. The lock is taken only when an error is replied, never on the hot path.
class ErrorTally {
 public:
  // A kind is an upper-case word of at most kMaxKindLength; anything else counts as ERR.
  static constexpr size_t kMaxKindLength = 32;

  void Count(std::string_view message);
  // Every kind counted so far, ordered by kind.
  std::vector<std::pair<std::string, uint64_t>> Snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t, std::less<>> counts_;  // guarded by mutex_
};

// Appends replies to a byte string. RESP3 differs from RESP2 only where the type
// system differs (null, map, set, verbatim text); the caller picks the version per
// connection (HELLO 3).
class ReplyWriter {
 public:
  ReplyWriter(std::string* out, int protocol) : out_(out), protocol_(protocol) {}

  int protocol() const { return protocol_; }
  void set_protocol(int protocol) { protocol_ = protocol; }
  // Error() counts each error reply here too (null: nowhere). `tally` must outlive this.
  void set_error_tally(ErrorTally* tally) { errors_ = tally; }

  void SimpleString(std::string_view text);  // +OK
  void Error(std::string_view message);      // -ERR ... (message holds the prefix)
  void Integer(int64_t value);               // :42
  void Bulk(std::string_view bytes);         // $3\r\nabc
  void BulkInteger(int64_t value);           // an integer as a bulk string (GET)
  void Null();                               // $-1 (RESP2) or _ (RESP3)
  void NullArray();                          // *-1 (RESP2) or _ (RESP3)
  void ArrayHeader(size_t count);            // *n
  void MapHeader(size_t pairs);              // %n (RESP3) or *2n (RESP2)
  void SetHeader(size_t count);              // ~n (RESP3) or *n (RESP2)
  void PushHeader(size_t count);             // >n (RESP3) or *n (RESP2): pub/sub messages
  void Verbatim(std::string_view text);      // =n\r\ntxt:... (RESP3) or bulk (RESP2)

 private:
  void Header(char type, int64_t count);
  std::string* out_;
  int protocol_;
  ErrorTally* errors_ = nullptr;
};

}  // namespace tally::redis
