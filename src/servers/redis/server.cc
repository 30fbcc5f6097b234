#include "servers/redis/server.h"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <mutex>

#include "core/thread_name.h"
#include "servers/accept.h"
#include "servers/listen.h"
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
    : core_(std::move(services), std::move(options)),
      acceptor_(accept_io_),
      tls_acceptor_(accept_io_) {
  if (metrics::Registry* registry = core_.services().metrics; registry != nullptr) {
    RegisterRedisMetrics(core_, *registry);
  }
}

RedisServer::~RedisServer() { Stop(); }

bool RedisServer::CloseWaitingClients(std::chrono::milliseconds timeout) {
  return OnEveryWorker([](Worker& worker) { worker.CloseWaitingClients(); }, timeout);
}

bool RedisServer::FoldIncrements(std::chrono::milliseconds timeout) {
  return OnEveryWorker([](Worker& worker) { worker.shard().FoldIncrements(); }, timeout);
}

bool RedisServer::OnEveryWorker(const std::function<void(Worker&)>& work,
                                std::chrono::milliseconds timeout) {
  struct Pending {
    std::mutex mutex;
    std::condition_variable done;
    size_t left = 0;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = workers_.size();
  for (const auto& worker : workers_) {
    worker->loop().Post([worker = worker.get(), pending, work] {
      work(*worker);
      std::lock_guard lock(pending->mutex);
      if (--pending->left == 0) pending->done.notify_all();
    });
  }
  std::unique_lock lock(pending->mutex);
  // A stopped server's workers run no more work, and have closed every client already.
  return pending->done.wait_for(lock, timeout, [&] { return pending->left == 0; }) ||
         stopped_.load(std::memory_order_acquire);
}

Status RedisServer::Start() {
  const int worker_count = core_.options().workers > 0 ? core_.options().workers : UsableCpus();
  for (int i = 0; i < worker_count; ++i) {
    workers_.push_back(std::make_unique<Worker>(core_, i));
    core_.AddWorkerStats(&workers_.back()->stats());
  }
  const ServerOptions& options = core_.options();
  if (options.plain) {
    auto status = servers::Listen(acceptor_, options.bind, options.port, "the Redis protocol");
    if (!status) return status;
    core_.set_bound_port(acceptor_.local_endpoint().port());
  }
  if (options.tls_port != 0) {
    auto status = servers::Listen(tls_acceptor_, options.bind, options.tls_port,
                                  "the Redis protocol over TLS");
    if (!status) return status;
    tls_port_ = tls_acceptor_.local_endpoint().port();
  }

  std::vector<servers::DurabilityGate*> gates;
  for (auto& worker : workers_) gates.push_back(&worker->gate());
  durable_.Attach(core_.engine().committer(), std::move(gates));
  for (auto& worker : workers_) worker->Start();
  sampler_ = std::make_unique<boost::asio::steady_timer>(accept_io_);
  SampleOps();
  if (acceptor_.is_open()) Accept(acceptor_, false);
  if (tls_acceptor_.is_open()) Accept(tls_acceptor_, true);
  accept_thread_ = NamedThread("redis accept", [this] { accept_io_.run(); });
  spdlog::info("serving the Redis protocol on {}{}{} with {} worker(s)", options.bind,
               options.plain ? fmt::format(" port {}", port()) : "",
               tls_port_ != 0 ? fmt::format(" TLS port {}", tls_port_) : "", worker_count);
  return OkStatus();
}

void RedisServer::Accept(boost::asio::ip::tcp::acceptor& acceptor, bool tls) {
  servers::AcceptConnections(
      acceptor, tls ? "Redis TLS" : "Redis", workers_, next_worker_,
      [this, tls](Worker& worker, boost::asio::ip::tcp::socket socket) {
        core_.connections_received.fetch_add(1, std::memory_order_relaxed);
        if (!tls) {
          const servers::Peer peer = servers::Peer::Of(socket);
          Admit(worker, std::move(socket), peer);
          return;
        }
        tls::TlsContext& context = *core_.services().tls;
        worker.tunnels().Serve(
            std::move(socket), context.Current(), context.options().auth_clients,
            [this, &worker](boost::asio::ip::tcp::socket inner, servers::Peer peer) {
              Admit(worker, std::move(inner), peer);
            });
      });
}

void RedisServer::Admit(Worker& worker, boost::asio::ip::tcp::socket socket, servers::Peer peer) {
  if (static_cast<int64_t>(core_.clients().size()) >= core_.options().maxclients) {
    core_.rejected_connections.fetch_add(1, std::memory_order_relaxed);
    boost::system::error_code ignored;
    boost::asio::write(
        socket, boost::asio::buffer(std::string_view("-ERR max number of clients reached\r\n")),
        ignored);
    socket.close(ignored);
    return;
  }
  worker.Adopt(std::move(socket), peer);
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
    tls_acceptor_.close(ignored);
    sampler_->cancel();
  });
  accept_thread_.join();
  durable_.Detach();
  for (auto& worker : workers_) worker->Stop();
  stopped_.store(true, std::memory_order_release);
}

}  // namespace tally::redis
