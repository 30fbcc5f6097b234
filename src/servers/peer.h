// Peer: the addresses of a client's TCP connection, as the servers report and judge them
// (CLIENT LIST, protected mode, the ACL log). A TLS client's socket, as a server reads it, is
// the inner end of a tunnel (servers/tls/tls_tunnel.h) whose own addresses say nothing:
// its Peer is the TCP connection's.
#pragma once

#include <fmt/format.h>

#include <boost/asio/ip/tcp.hpp>
#include <string>

namespace tally::servers {

struct Peer {
  boost::asio::ip::tcp::endpoint remote;  // the client's address
  boost::asio::ip::tcp::endpoint local;   // ours, the one it connected to

  // The addresses of an accepted plain TCP socket.
  static Peer Of(const boost::asio::ip::tcp::socket& socket) {
    boost::system::error_code ignored;
    return Peer{socket.remote_endpoint(ignored), socket.local_endpoint(ignored)};
  }
};

// "ip:port", as CLIENT LIST spells an address.
inline std::string FormatEndpoint(const boost::asio::ip::tcp::endpoint& endpoint) {
  return fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
}

}  // namespace tally::servers
