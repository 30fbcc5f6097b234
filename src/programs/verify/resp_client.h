// A small blocking client of tallyd's Redis protocol (RESP2, and RESP3's null and map), for
// `tally verify`: one connection, one command (or one pipelined batch) at a time, every
// read and write bounded by a timeout.
//
// Errors are values. After a lost connection (closed, timed out, a reply that does not
// parse) the client is closed: Connect again to go on. Not thread-safe: one thread owns a
// client.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tally::verify {

// Who tally signs in to tallyd as: a user of tallyd's ACL (empty: the default user, whose
// password is --requirepass) and its password (empty: no AUTH).
struct Credentials {
  std::string user;
  std::string password;
};

// One reply, arrays (and maps, flattened to key, value, key, value…) with their items.
struct Reply {
  enum class Kind { kSimple, kError, kInteger, kBulk, kNil, kArray } kind = Kind::kNil;
  std::string text;  // simple, error, bulk
  int64_t integer = 0;
  std::vector<Reply> items;

  bool is_error() const { return kind == Kind::kError; }
  // An integer reply, or a bulk or simple string that holds one (decimal, nothing else).
  std::optional<int64_t> AsInteger() const;
  // For messages: the simple string, "error <text>", the integer, the bulk string quoted
  // (its first 80 bytes), "nil" or "an array of N".
  std::string Describe() const;
};

class RespClient {
 public:
  RespClient() = default;
  ~RespClient() { Close(); }
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;

  // Connects to `address` ("host:port", "[v6]:port") within `timeout`; every later read or
  // write waits at most `io_timeout`. Authenticates when a password is given: AUTH user
  // password, or AUTH password for the default user. Errors name the address. REQUIRES:
  // not connected.
  Status Connect(const std::string& address, const Credentials& credentials,
                 std::chrono::milliseconds timeout, std::chrono::milliseconds io_timeout);

  // Closes the connection. Idempotent.
  void Close();

  // Sends the commands in one write, then reads their replies in order. An error reply is a
  // reply; the error is a lost connection ("connection to tallyd at … lost: …").
  Result<std::vector<Reply>> Pipeline(const std::vector<std::vector<std::string>>& commands);

  // One command's reply.
  Result<Reply> Call(const std::vector<std::string>& args);

  // Call, with an error reply turned into an error "tallyd: <command>: <error text>".
  Result<Reply> Check(const std::vector<std::string>& args);

 private:
  Error Lost(const std::string& why);
  Status Fill();
  Result<std::string> ReadLine();
  Result<int64_t> ParseLength(const std::string& line);
  Result<Reply> ReadReply();

  std::string address_;
  int fd_ = -1;
  std::string in_;  // bytes received and not parsed yet, from pos_
  size_t pos_ = 0;
};

}  // namespace tally::verify
