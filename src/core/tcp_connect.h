// ConnectTcp: a blocking TCP connection to host:port with bounded waits, for the few places
// that speak a protocol over a plain socket of their own (tally verify's RESP client, the
// NATS server-name probe in cluster/leader_connections.h).
#pragma once

#include <chrono>
#include <string>

#include "core/status.h"

namespace tally {

// Resolves `host` (a name or an address, an IPv6 one without brackets) and connects to
// `port` on each of its addresses in turn, each within `timeout`; the socket that connects
// is blocking, with `io_timeout` on every read and write, TCP_NODELAY and close-on-exec. The
// caller owns (and closes) it. kUnavailable when the host cannot be resolved ("cannot resolve
// <host>: <why>") or no address connects (the last address's reason, such as "Connection
// refused" or "timed out").
Result<int> ConnectTcp(const std::string& host, const std::string& port,
                       std::chrono::milliseconds timeout, std::chrono::milliseconds io_timeout);

}  // namespace tally
