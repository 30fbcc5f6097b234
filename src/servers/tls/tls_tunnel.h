// TLS tunnels: a TLS client, decrypted into a plain socket a server reads as any other.
//
// The servers' connections are written for a plain socket (the Redis one reads and writes it
// without blocking, at readiness, and hands nothing to a TLS engine between). Rather than a
// second, TLS-aware copy of each, a TLS connection is a tunnel on the same event loop: it
// does the handshake, then relays bytes between the TLS stream and one end of a local socket
// pair (AF_UNIX); the other end goes to the server as the connection's socket, with the TCP
// connection's addresses (servers::Peer). The cost is a copy and two system calls per
// direction and buffer, paid by TLS clients only; plain clients are untouched.
//
// Ends: the client closing (or its TLS failing) shuts the inner socket's sending side, so the
// server sees the end of input as from a plain client; the server closing its end makes the
// tunnel send TLS close_notify and close. A handshake not done within 10 s closes the
// connection (a client that connects and sends nothing holds no tunnel for long).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "servers/peer.h"
#include "servers/tls/tls_options.h"

namespace tally::tls {

// Takes the server's end of an established tunnel: a socket on the accepted socket's
// executor (an AF_UNIX socket behind the tcp::socket type: its endpoints and TCP options
// mean nothing, `peer` says where the client is). Called on that executor.
using AdoptTunnel = std::function<void(boost::asio::ip::tcp::socket inner, servers::Peer peer)>;

class Tunnel;

// The TLS tunnels of one event loop (a server's worker), so that the worker can close them
// when it stops: a tunnel waiting for a handshake or a close_notify would otherwise keep the
// loop running. Serve() from any thread; CloseAll() on the loop's thread.
class TunnelSet {
 public:
  // Starts serving `socket` (just accepted on a TLS port, on this loop's executor) with
  // `context`; `auth` says whether a client certificate is asked for. `adopt` is called once
  // the handshake succeeded; on any failure the connection is closed and `adopt` is not
  // called.
  void Serve(boost::asio::ip::tcp::socket socket,
             std::shared_ptr<boost::asio::ssl::context> context, ClientAuth auth,
             AdoptTunnel adopt);

  // Closes every tunnel at once (both sockets, no close_notify).
  void CloseAll();

 private:
  std::mutex mutex_;
  std::vector<std::weak_ptr<Tunnel>> tunnels_;  // guarded by mutex_; pruned as it grows
  size_t prune_at_ = 64;                        // guarded by mutex_
};

}  // namespace tally::tls
