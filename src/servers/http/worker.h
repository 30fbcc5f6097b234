// HttpWorker: one I/O thread of the HTTP server, with its own event loop (an Asio
// io_context), its connections and its Api (so its own change decoder and JSON parser).
//
// Durability. A response that reports writes or reads values waits until the commit
// epoch it depends on is durable (sync mode). The worker holds such responses; once per
// event-loop turn it commits on its own thread (TryCommitNow, as the Redis workers do:
// no thread hand-off) and sends every response whose epoch is now durable. A response
// whose epoch another thread was committing is sent when that commit is announced
// (OnDurable), which starts another turn.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/derived/derived_counters.h"
#include "engine/engine.h"
#include "servers/http/http_options.h"
#include "servers/http/routes.h"

namespace tally::http {

class HttpConnection;

// What every worker of one server shares.
struct HttpShared {
  engine::Engine& engine;
  derived::DerivedCounters& derived;
  const HttpOptions options;
  std::atomic<int64_t> connections{0};  // open, counted against max_connections
  std::atomic<uint64_t> refused{0};     // refused for max_connections
  ApiRequestCounts requests;            // every response, by route and status class
};

class HttpWorker {
 public:
  HttpWorker(HttpShared& shared, int index);
  ~HttpWorker();  // Stops (see Stop()).
  HttpWorker(const HttpWorker&) = delete;
  HttpWorker& operator=(const HttpWorker&) = delete;

  boost::asio::io_context& io() { return io_; }
  HttpShared& shared() { return shared_; }
  Api& api() { return api_; }

  void Start();
  // Closes every connection, drops the responses waiting for durability and joins the
  // thread. Call once no more sockets are handed to Adopt().
  void Stop();

  // Takes an accepted socket of this worker's io_context. With `refuse`, the connection
  // only gets 503 and is closed (it is not counted). Any thread.
  void Adopt(boost::asio::ip::tcp::socket socket, bool refuse);
  void Forget(HttpConnection* connection);

  // Runs `then` on this thread once `epoch` is durable: now, when it already is.
  void WhenDurable(uint64_t epoch, std::function<void()> then);

  // The committer announced a durable epoch. Any thread.
  void OnDurable();

 private:
  struct Waiting {
    uint64_t epoch = 0;
    std::function<void()> then;
  };
  void ScheduleRelease();
  void Release();

  HttpShared& shared_;
  const int index_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::thread thread_;
  Api api_;
  std::atomic<bool> durable_notice_pending_{false};
  // Some response waits for durability: see the Redis worker's field of the same name.
  std::atomic<bool> has_waiting_{false};

  // This worker's thread only.
  std::unordered_map<HttpConnection*, std::shared_ptr<HttpConnection>> connections_;
  std::vector<Waiting> waiting_;
  bool release_scheduled_ = false;
  bool stopping_ = false;
};

}  // namespace tally::http
