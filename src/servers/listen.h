// Listen: opens a server's listening socket, the same way for every port of both servers.
#pragma once

#include <fmt/format.h>

#include <boost/asio/ip/tcp.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tally::servers {

// Binds `acceptor` (not open yet) to bind:port and listens; port 0 picks a free port. The
// error names `what` ("the Redis protocol", "HTTP over TLS") and the address.
inline Status Listen(boost::asio::ip::tcp::acceptor& acceptor, const std::string& bind,
                     uint16_t port, std::string_view what) {
  boost::system::error_code error;
  const auto address = boost::asio::ip::make_address(bind, error);
  if (error) return InvalidArgument(fmt::format("bad bind address '{}' for {}", bind, what));
  const boost::asio::ip::tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(boost::asio::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(boost::asio::socket_base::max_listen_connections, error);
  if (error) {
    return IOError(
        fmt::format("cannot listen for {} on {}:{}: {}", what, bind, port, error.message()));
  }
  return OkStatus();
}

}  // namespace tally::servers
