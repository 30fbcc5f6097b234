// ServerCore: what every connection of the Redis-protocol server shares — the node's services
// (the engine first), the options, the registry of clients, and the counters INFO reports.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "servers/auth/acl.h"
#include "servers/redis/command_table.h"
#include "servers/redis/server_options.h"
#include "servers/services.h"

namespace tally::redis {

// One client as CLIENT LIST shows it. Written by the client's worker, read by any thread:
// the few fields another thread reads are atomics or guarded by `mutex`.
struct ClientInfo {
  uint64_t id = 0;
  std::string address;        // peer ip:port
  std::string local_address;  // our ip:port
  int fd = -1;
  int64_t created_ms = 0;
  std::atomic<int64_t> last_interaction_ms{0};
  std::atomic<const CommandSpec*> last_command{nullptr};
  std::atomic<int> protocol{2};
  std::atomic<bool> in_multi{false};
  std::atomic<uint32_t> db{0};  // the selected database
  std::atomic<size_t> query_buffer_bytes{0};
  std::atomic<size_t> output_buffer_bytes{0};
  mutable std::mutex mutex;
  std::string name;  // guarded by mutex
};

// Every connected client, by id. Thread-safe.
class ClientRegistry {
 public:
  std::shared_ptr<ClientInfo> Add(std::string address, std::string local_address, int fd,
                                  int64_t now_ms);
  void Remove(uint64_t id);
  std::vector<std::shared_ptr<ClientInfo>> Snapshot() const;
  size_t size() const { return count_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mutex_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<ClientInfo>> clients_;  // guarded by mutex_
  std::atomic<uint64_t> next_id_{1};
  std::atomic<size_t> count_{0};
};

// Counters one worker writes and anyone reads (relaxed loads, single writer each).
struct WorkerStats {
  explicit WorkerStats(size_t command_count) : calls(command_count) {}
  std::atomic<uint64_t> commands{0};
  std::atomic<uint64_t> net_input_bytes{0};
  std::atomic<uint64_t> net_output_bytes{0};
  std::atomic<uint64_t> increments_folded{0};  // increments applied through the buffer
  std::atomic<uint64_t> folds{0};              // IncrementBuffer::Publish calls
  std::atomic<uint64_t> output_limit_disconnects{0};
  std::atomic<uint64_t> protocol_errors{0};
  std::vector<std::atomic<uint64_t>> calls;  // per command, indexed like AllCommands()
  ErrorTally errors;                         // error replies by kind

  // Adds one to a counter only this worker writes: no read-modify-write on a shared line.
  static void Bump(std::atomic<uint64_t>& counter, uint64_t by = 1) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
};

class ServerCore {
 public:
  ServerCore(servers::Services services, ServerOptions options);

  engine::Engine& engine() { return services_.engine; }
  // The derived counters, or null when the server has none (unit tests).
  derived::DerivedCounters* derived() { return services_.derived; }
  // The PostgreSQL source's figures for INFO's "# Source" section; empty when there is no
  // source (tallyd without --source).
  const StatusReporter& source_report() const { return services_.source_report; }
  // The live subscriptions (SUBSCRIBE, PSUBSCRIBE), or null when the server offers none.
  engine::SubscriptionHub* subscriptions() { return services_.subscriptions; }
  const servers::Services& services() const { return services_; }
  // The cluster's routes and topology, or null on a single node.
  cluster::Routing* cluster() const { return services_.cluster; }
  // A cluster node's front of the derived counters' writes, or null.
  cluster::ChangeFront* cluster_changes() const { return services_.cluster_changes; }
  // The node's users, or the server's own (the default user with --requirepass).
  auth::Acl& acl() { return *acl_; }
  const ServerOptions& options() const { return options_; }
  ClientRegistry& clients() { return clients_; }
  int64_t start_ms() const { return start_ms_; }

  void set_bound_port(uint16_t port) { bound_port_ = port; }
  uint16_t bound_port() const { return bound_port_; }

  // Registers a worker's stats; called before the server starts serving.
  void AddWorkerStats(const WorkerStats* stats) { worker_stats_.push_back(stats); }
  const std::vector<const WorkerStats*>& worker_stats() const { return worker_stats_; }
  int worker_count() const { return static_cast<int>(worker_stats_.size()); }

  std::atomic<uint64_t> connections_received{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> ops_per_second{0};  // sampled by the server's timer

  // Sum of one WorkerStats field over every worker.
  uint64_t Total(std::atomic<uint64_t> WorkerStats::*field) const;
  // Error replies by kind, summed over every worker (INFO errorstats, metrics).
  std::map<std::string, uint64_t> ErrorTotals() const;
  // Calls of AllCommands()[command], summed over every worker.
  uint64_t Calls(size_t command) const;

 private:
  const servers::Services services_;
  const ServerOptions options_;
  std::unique_ptr<auth::Acl> own_acl_;  // when the services have none
  auth::Acl* acl_;
  ClientRegistry clients_;
  const int64_t start_ms_;
  uint16_t bound_port_ = 0;
  std::vector<const WorkerStats*> worker_stats_;
};

}  // namespace tally::redis
