// Protected mode, as Redis's: a server that anyone could use without a password (no
// --requirepass, no user with one: the default user is open) serves only clients on the
// loopback interface, until a password is set or --protected-mode no says the operator knows.
// A server bound to loopback only never meets another client; one bound to 0.0.0.0 with no
// password refuses the network with kProtectedModeMessage instead of serving it.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <string_view>

namespace tally::servers {

// Redis's explanation, adapted to tallyd's options (the Redis server answers it as an
// error reply, -DENIED ...; the HTTP server in a 403 body).
inline constexpr std::string_view kProtectedModeMessage =
    "DENIED tally is running in protected mode because protected mode is enabled and no "
    "password is set for the default user. In this mode connections are only accepted from "
    "the loopback interface. If you want to connect from external computers to tally you may "
    "adopt one of the following solutions: 1) Set up an authentication password for the "
    "default user (--requirepass) or users with passwords (--aclfile), and restart tallyd. "
    "2) Restart tallyd with the '--protected-mode no' option, but MAKE SURE tally is not "
    "publicly accessible from internet if you do so. NOTE: You only need to do one of the "
    "above things in order for the server to start accepting connections from the outside.";

// True for 127.0.0.0/8, ::1 and IPv4-mapped 127.x addresses.
inline bool IsLoopback(const boost::asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6())
        .is_loopback();
  }
  return address.is_loopback();
}

// Whether a client at `client` is refused: protected mode is on (`enabled`), the server is
// open (anyone gets in without a password) and the client is not on the loopback interface.
inline bool RefusedByProtectedMode(bool enabled, bool open,
                                   const boost::asio::ip::address& client) {
  return enabled && open && !IsLoopback(client);
}

}  // namespace tally::servers
