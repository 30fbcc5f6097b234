// The thread of one event loop, shared by the Redis and HTTP workers.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "core/thread_name.h"

namespace tally::servers {

// Runs `run` (an event loop: an io_context's run() until it runs out of work, an
// EpollLoop's Run() until it quits) on a new thread named `name`. An exception escaping a handler
// is a bug: it is logged and the process aborts, rather than leaving a dead loop whose clients
// would hang unanswered.
inline std::thread RunEventLoop(std::function<void()> run, std::string name) {
  return NamedThread(name, [run = std::move(run), name] {
    try {
      run();
    } catch (const std::exception& e) {
      spdlog::critical("{} stopped by an exception: {}", name, e.what());
      std::abort();
    }
  });
}

}  // namespace tally::servers
