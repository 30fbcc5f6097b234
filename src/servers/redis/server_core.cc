#include "servers/redis/server_core.h"

#include <algorithm>

#include "servers/redis/acl_commands.h"

namespace tally::redis {

std::shared_ptr<ClientInfo> ClientRegistry::Add(std::string address, std::string local_address,
                                                int fd, int64_t now_ms) {
  auto info = std::make_shared<ClientInfo>();
  info->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  info->address = std::move(address);
  info->local_address = std::move(local_address);
  info->fd = fd;
  info->created_ms = now_ms;
  info->last_interaction_ms.store(now_ms, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  clients_.emplace(info->id, info);
  count_.store(clients_.size(), std::memory_order_relaxed);
  return info;
}

void ClientRegistry::Remove(uint64_t id) {
  std::lock_guard lock(mutex_);
  clients_.erase(id);
  count_.store(clients_.size(), std::memory_order_relaxed);
}

std::vector<std::shared_ptr<ClientInfo>> ClientRegistry::Snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<ClientInfo>> all;
  all.reserve(clients_.size());
  for (const auto& [id, info] : clients_) all.push_back(info);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a->id < b->id; });
  return all;
}

ServerCore::ServerCore(servers::Services services, ServerOptions options)
    : services_(std::move(services)),
      options_(std::move(options)),
      start_ms_(services_.engine.keyspace().clock()->NowMillis()) {
  acl_ = services_.acl;
  if (acl_ == nullptr) {
    own_acl_ = std::make_unique<auth::Acl>(AclCommandInfo(), options_.requirepass);
    acl_ = own_acl_.get();
  }
}

uint64_t ServerCore::Total(std::atomic<uint64_t> WorkerStats::*field) const {
  uint64_t total = 0;
  for (const WorkerStats* stats : worker_stats_) {
    total += (stats->*field).load(std::memory_order_relaxed);
  }
  return total;
}

std::map<std::string, uint64_t> ServerCore::ErrorTotals() const {
  std::map<std::string, uint64_t> totals;
  for (const WorkerStats* stats : worker_stats_) {
    for (const auto& [kind, count] : stats->errors.Snapshot()) totals[kind] += count;
  }
  return totals;
}

uint64_t ServerCore::Calls(size_t command) const {
  uint64_t calls = 0;
  for (const WorkerStats* stats : worker_stats_) {
    calls += stats->calls[command].load(std::memory_order_relaxed);
  }
  return calls;
}

}  // namespace tally::redis
