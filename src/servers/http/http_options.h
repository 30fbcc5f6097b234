// The HTTP API server's settings: where it listens and the limits that keep one client
// from harming the others. Each field names its tallyd option and its default. What the
// server serves from (engine, derived counters, metrics...) is its servers::Services.
#pragma once

#include <cstdint>
#include <string>

namespace tally::http {

struct HttpOptions {
  std::string bind = "127.0.0.1";  // --http-bind: listen address; loopback unless told otherwise
  uint16_t port = 6381;            // --http-port; 0 picks a free port
  // --http-tls-port: the port of HTTPS clients (the node's services.tls); 0 = none.
  uint16_t tls_port = 0;
  bool plain = true;  // false with --plain-ports no: only the TLS port listens
  int threads = 1;    // --http-threads: I/O threads, each with its event loop
  // --http-max-body: the largest request body; a larger one gets 413 and the connection
  // is closed. Default 64 MiB.
  uint64_t max_body_bytes = uint64_t{64} << 20;
  // The largest request line plus header fields; larger gets 431. Default 16 KiB.
  uint32_t max_header_bytes = uint32_t{16} << 10;
  // --http-max-connections: more simultaneous connections get 503 and are closed.
  int64_t max_connections = 10000;
  // --http-timeout: a connection is closed when a request has not arrived whole this many
  // seconds after the previous response (or the connect), or a response could not be
  // written within it. An idle keep-alive connection is closed silently; a request cut
  // short gets 408 first. Default 60.
  int64_t idle_timeout_seconds = 60;
  // tallyd's --requirepass: when set, every request needs "Authorization: Bearer <it>".
  std::string password;
  // tallyd's --protected-mode: with no password, clients off the loopback interface get 403
  // (servers/protected_mode.h).
  bool protected_mode = true;
  // tallyd --public-metrics: GET /metrics without the password.
  bool public_metrics = false;
};

}  // namespace tally::http
