// Thread names, for what reads them: top -H, perf report --sort comm, gdb, /proc/<pid>/task.
// Every long-lived thread of tallyd names itself first thing, so that a profile of a busy
// node says which thread spends the time (a cluster node runs a writer and a reader thread
// per partition beside the servers' workers).
#pragma once

#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace tally {

// Names the calling thread. Linux keeps 15 bytes of a name: a longer one is cut there.
// Best effort: a name the system refuses leaves the thread as it was.
void NameThisThread(std::string_view name);

// A new thread that names itself `name`, then runs `body`: how every long-lived thread of
// tallyd starts.
template <typename Body>
std::thread NamedThread(std::string name, Body body) {
  return std::thread([name = std::move(name), body = std::move(body)]() mutable {
    NameThisThread(name);
    body();
  });
}

}  // namespace tally
