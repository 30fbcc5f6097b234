// The thread of one event loop, shared by the Redis and HTTP workers.
#pragma once

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

namespace tally::servers {

// Runs `io` on a new thread until it runs out of work (its work guard released). An
// exception escaping a handler is a bug: it is logged and the process aborts, rather than
// leaving a dead loop whose clients would hang unanswered.
inline std::thread RunEventLoop(boost::asio::io_context& io, std::string name) {
  return std::thread([&io, name = std::move(name)] {
    try {
      io.run();
    } catch (const std::exception& e) {
      spdlog::critical("{} stopped by an exception: {}", name, e.what());
      std::abort();
    }
  });
}

}  // namespace tally::servers
