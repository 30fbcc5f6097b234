// The Redis-protocol server's settings: where it listens and the limits that keep one
// client from harming the others. Each field names its tallyd option and its default.
#pragma once

#include <cstdint>
#include <string>

#include "engine/databases.h"

namespace tally::redis {

struct ServerOptions {
  std::string bind = "127.0.0.1";  // --bind: listen address; loopback unless told otherwise
  uint16_t port = 6380;            // --port; 0 picks a free port
  // --tls-port: the port of TLS clients (the node's services.tls); 0 = none, as in Redis.
  uint16_t tls_port = 0;
  bool plain = true;        // false with --plain-ports no: only the TLS port listens
  int workers = 0;          // --workers: I/O threads; 0 = the CPUs this process may use
  std::string requirepass;  // --requirepass: the default user's password (AUTH first)
  // --protected-mode: with no password, clients off the loopback interface are refused
  // (servers/protected_mode.h).
  bool protected_mode = true;
  int64_t maxclients = 10000;   // --maxclients: more connections are refused
  int64_t timeout_seconds = 0;  // --timeout: idle clients are closed; 0 = never
  // --request-timeout: a client whose request has begun but not arrived whole this many
  // seconds later (a slow-loris) is told so and closed; 0 = never. Unlike --timeout, a
  // byte now and then does not reset it: only a whole request does.
  int64_t request_timeout_seconds = 60;
  int64_t proto_max_bulk_len = 512LL << 20;          // --proto-max-bulk-len
  int64_t max_multibulk_length = 1 << 20;            // --max-multibulk-length
  int64_t client_query_buffer_limit = 1LL << 30;     // --client-query-buffer-limit
  int64_t client_output_buffer_limit = 256LL << 20;  // --client-output-buffer-limit
  // --databases: SELECT takes 0 to databases - 1 (at most engine::kMaxDatabases).
  uint32_t databases = engine::kDefaultDatabases;
  // --aclfile: where ACL SAVE writes the users and ACL LOAD reads them (the node loads it at
  // start); empty = ACL SAVE and LOAD are refused.
  std::string aclfile;
  std::string config_file;  // for INFO; the file the options came from, if any
  std::string data_dir;     // for INFO and CONFIG GET dir
};

}  // namespace tally::redis
