// Accept: the accept loop of a listening socket, the same for every port of both servers.
#pragma once

#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace tally::servers {

// Accepts connections on `acceptor` until it is closed. Each connection is accepted onto the
// io_context of the next of `workers` in turn (`next_worker` is the turn, shared by a
// server's acceptors), then handed to `admit(worker, socket)` on the acceptor's thread. A
// server's acceptors share one thread, so the turn needs no lock. A failed accept (out of file
// descriptors and the like) is logged as "`what` accept failed" and retried after 100 ms, with a
// timer per pause, since several acceptors may pause at once; closing the acceptor ends the loop.
// `what` must outlive the loop (a literal); so must `workers` and `next_worker`.
template <typename Worker, typename Admit>
void AcceptConnections(boost::asio::ip::tcp::acceptor& acceptor, std::string_view what,
                       const std::vector<std::unique_ptr<Worker>>& workers, size_t& next_worker,
                       Admit admit) {
  Worker& worker = *workers[next_worker];
  next_worker = (next_worker + 1) % workers.size();
  acceptor.async_accept(
      worker.io(),
      [&acceptor, &worker, what, &workers, &next_worker, admit = std::move(admit)](
          const boost::system::error_code& error, boost::asio::ip::tcp::socket socket) mutable {
        if (error == boost::asio::error::operation_aborted) return;
        if (error) {
          spdlog::warn("{} accept failed: {}", what, error.message());
          auto retry = std::make_shared<boost::asio::steady_timer>(acceptor.get_executor(),
                                                                   std::chrono::milliseconds(100));
          retry->async_wait([&acceptor, what, &workers, &next_worker, admit = std::move(admit),
                             retry](const boost::system::error_code& failed) mutable {
            if (failed || !acceptor.is_open()) return;
            AcceptConnections(acceptor, what, workers, next_worker, std::move(admit));
          });
          return;
        }
        admit(worker, std::move(socket));
        AcceptConnections(acceptor, what, workers, next_worker, std::move(admit));
      });
}

}  // namespace tally::servers
