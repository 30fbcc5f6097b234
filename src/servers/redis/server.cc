#include "servers/redis/server.h"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "servers/redis/redis_metrics.h"
#include "servers/redis/worker.h"

namespace tally::redis {
namespace {

// The CPUs this process may run on (taskset), which is how many workers pay off.
int UsableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

RedisServer::RedisServer(servers::Services services, ServerOptions options)
    : core_(std::move(services), std::move(options)), acceptor_(accept_io_) {
  if (metrics::Registry* registry = core_.services().metrics; registry != nullptr) {
    RegisterRedisMetrics(core_, *registry);
  }
}

RedisServer::~RedisServer() { Stop(); }

Status RedisServer::Start() {
  const int worker_count = core_.options().workers > 0 ? core_.options().workers : UsableCpus();
  for (int i = 0; i < worker_count; ++i) {
    workers_.push_back(std::make_unique<Worker>(core_, i));
    core_.AddWorkerStats(&workers_.back()->stats());
  }
  boost::system::error_code error;
  const auto address = boost::asio::ip::make_address(core_.options().bind, error);
  if (error) return InvalidArgument(fmt::format("bad --bind address '{}'", core_.options().bind));
  const boost::asio::ip::tcp::endpoint endpoint(address, core_.options().port);
  acceptor_.open(endpoint.protocol(), error);
  if (!error) acceptor_.set_option(boost::asio::socket_base::reuse_address(true), error);
  if (!error) acceptor_.bind(endpoint, error);
  if (!error) acceptor_.listen(boost::asio::socket_base::max_listen_connections, error);
  if (error) {
    return IOError(fmt::format("cannot listen on {}:{}: {}", core_.options().bind,
                               core_.options().port, error.message()));
  }
  core_.set_bound_port(acceptor_.local_endpoint().port());

  std::vector<servers::DurabilityGate*> gates;
  for (auto& worker : workers_) gates.push_back(&worker->gate());
  durable_.Attach(core_.engine().committer(), std::move(gates));
  for (auto& worker : workers_) worker->Start();
  sampler_ = std::make_unique<boost::asio::steady_timer>(accept_io_);
  accept_retry_ = std::make_unique<boost::asio::steady_timer>(accept_io_);
  SampleOps();
  Accept();
  accept_thread_ = std::thread([this] { accept_io_.run(); });
  spdlog::info("serving the Redis protocol on {}:{} with {} worker(s)", core_.options().bind,
               port(), worker_count);
  return OkStatus();
}

void RedisServer::Accept() {
  Worker& worker = *workers_[next_worker_];
  next_worker_ = (next_worker_ + 1) % workers_.size();
  acceptor_.async_accept(worker.io(), [this, &worker](const boost::system::error_code& error,
                                                      boost::asio::ip::tcp::socket socket) {
    if (error == boost::asio::error::operation_aborted) return;
    if (!error) {
      core_.connections_received.fetch_add(1, std::memory_order_relaxed);
      if (static_cast<int64_t>(core_.clients().size()) >= core_.options().maxclients) {
        core_.rejected_connections.fetch_add(1, std::memory_order_relaxed);
        boost::system::error_code ignored;
        boost::asio::write(
            socket, boost::asio::buffer(std::string_view("-ERR max number of clients reached\r\n")),
            ignored);
        socket.close(ignored);
      } else {
        worker.Adopt(std::move(socket));
      }
    } else {
      // Out of file descriptors and the like: log, pause a little, keep serving.
      spdlog::warn("accept failed: {}", error.message());
      accept_retry_->expires_after(std::chrono::milliseconds(100));
      accept_retry_->async_wait([this](const boost::system::error_code& cancelled) {
        if (!cancelled) Accept();
      });
      return;
    }
    Accept();
  });
}

void RedisServer::SampleOps() {
  sampler_->expires_after(std::chrono::milliseconds(1000));
  sampler_->async_wait([this](const boost::system::error_code& error) {
    if (error) return;
    const uint64_t commands = core_.Total(&WorkerStats::commands);
    core_.ops_per_second.store(commands - last_commands_, std::memory_order_relaxed);
    last_commands_ = commands;
    SampleOps();
  });
}

void RedisServer::Stop() {
  if (!accept_thread_.joinable()) return;
  boost::asio::post(accept_io_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    sampler_->cancel();
    accept_retry_->cancel();
  });
  accept_thread_.join();
  durable_.Detach();
  for (auto& worker : workers_) worker->Stop();
}

}  // namespace tally::redis
