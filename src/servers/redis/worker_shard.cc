#include "servers/redis/worker_shard.h"

#include <algorithm>

#include "servers/redis/session.h"

namespace tally::redis {

WorkerShard::WorkerShard(engine::Keyspace* keyspace)
    : stats_(AllCommands().size()), increments_(keyspace) {}

void WorkerShard::Forget(Session* session) { std::erase(awaiting_, session); }

void WorkerShard::FoldIncrements() {
  if (increments_.empty()) return;
  const uint64_t epoch = increments_.Publish();
  for (Session* session : awaiting_) session->FillHoles(increments_, epoch);
  awaiting_.clear();
  WorkerStats::Bump(stats_.folds);
  WorkerStats::Bump(stats_.increments_folded, increments_.size());
  increments_.Clear();
}

}  // namespace tally::redis
