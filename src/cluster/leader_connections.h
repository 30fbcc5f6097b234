// LeaderConnections: one NATS connection pinned to each NATS server, so that a partition's
// owner can publish its records to the server that leads the partition's stream.
//
// Why: nats.c connects to a server picked at random, and JetStream elects each stream's
// leader. When the two differ, every record and its PubAck cross between servers once more.
// Measured with one record in flight (`build/bin/cluster_log_bench 1 1 130 3`, the "led
// here" column; docs/benchmarks.md, "Publishing to the stream's leader"): about a fifth
// less nats-server CPU a record and a sixth less latency when the publisher is on the
// leader.
//
// A server's name (what a stream's state reports as its leader) is read from the INFO line
// every NATS server sends first on a new connection (`server_name`; nats.c does not expose
// it), over a plain TCP connection of its own, before any TLS.
//
// Only a speed-up: a record is as safe through any server (fencing is checked by the
// stream's replicas). A pinned connection that lost its server reconnects to the next one
// (and stays there); it is then no longer handed out for its server's streams.
//
// Thread-safe after Open: On() is called by the partition ownership's threads.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/nats_client.h"
#include "core/status.h"

namespace tally::cluster {

// The name of the NATS server at `url` (nats://host:port, tls://host:port, or host:port,
// with or without user:password@), from the INFO line it sends first. kUnavailable when it
// cannot be reached or sends no name within `timeout`.
Result<std::string> ReadServerName(const std::string& url, std::chrono::milliseconds timeout);

class LeaderConnections {
 public:
  // A connection to each of options.servers (options otherwise as given, the servers tried
  // in order from that one), each named by its server. A server that cannot be reached or
  // named is left out: the caller's own connection serves its streams. With one server,
  // none is made (the caller's connection is already on it).
  static std::unique_ptr<LeaderConnections> Open(const ConnectOptions& options);

  // The connection on the server named `leader` while it is connected there; nullptr when
  // none is (unknown name, empty name, or its connection moved to another server).
  NatsConnection* On(std::string_view leader) const;

  // The servers named, in the order given.
  std::vector<std::string> names() const;

 private:
  struct Pinned {
    std::string address;  // "host:port" of its own server's URL
    std::string name;
    std::unique_ptr<NatsConnection> connection;
  };
  std::vector<Pinned> pinned_;
};

}  // namespace tally::cluster
