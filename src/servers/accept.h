// Accept: the accept loop of a listening socket, the same for every port of both servers.
#pragma once

#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string_view>
#include <utility>

namespace tally::servers {

// Accepts connections on `acceptor` until it is closed. Each connection is accepted onto the
// io_context of the worker `next_worker()` returns (a Worker& with io()), then handed to
// `admit(worker, socket)`. Both callables run on the acceptor's thread, one at a time per
// acceptor. A failed accept (out of file descriptors and the like) is logged as "`what`
// accept failed" and retried after 100 ms, with a timer per pause, since several acceptors
// may pause at once; closing the acceptor ends the loop. `what` must outlive the loop (a
// literal).
template <typename NextWorker, typename Admit>
void AcceptConnections(boost::asio::ip::tcp::acceptor& acceptor, std::string_view what,
                       NextWorker next_worker, Admit admit) {
  auto& worker = next_worker();
  acceptor.async_accept(
      worker.io(),
      [&acceptor, &worker, what, next_worker = std::move(next_worker), admit = std::move(admit)](
          const boost::system::error_code& error, boost::asio::ip::tcp::socket socket) mutable {
        if (error == boost::asio::error::operation_aborted) return;
        if (error) {
          spdlog::warn("{} accept failed: {}", what, error.message());
          auto retry = std::make_shared<boost::asio::steady_timer>(acceptor.get_executor(),
                                                                   std::chrono::milliseconds(100));
          retry->async_wait([&acceptor, what, next_worker = std::move(next_worker),
                             admit = std::move(admit),
                             retry](const boost::system::error_code& failed) mutable {
            if (failed || !acceptor.is_open()) return;
            AcceptConnections(acceptor, what, std::move(next_worker), std::move(admit));
          });
          return;
        }
        admit(worker, std::move(socket));
        AcceptConnections(acceptor, what, std::move(next_worker), std::move(admit));
      });
}

}  // namespace tally::servers
