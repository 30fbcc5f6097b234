// WorkerShard: the part of a worker that its sessions use — the worker's stats, its shard of
// every hot counter (an IncrementBuffer), and the fold that publishes the shard and writes
// each queued increment's reply. It does no I/O and knows no event loop, so that sessions can
// be driven without sockets (session_test.cc). One per worker; its thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/increment_buffer.h"
#include "servers/redis/server_core.h"

namespace tally::redis {

class Session;

class WorkerShard {
 public:
  explicit WorkerShard(engine::Keyspace* keyspace);
  WorkerShard(const WorkerShard&) = delete;
  WorkerShard& operator=(const WorkerShard&) = delete;

  WorkerStats& stats() { return stats_; }
  engine::IncrementBuffer& increments() { return increments_; }

  // `session` queued its first increment since the last fold: the next fold fills its holes.
  void AwaitFold(Session* session) { awaiting_.push_back(session); }
  // `session` goes away before the fold (its holes are dropped).
  void Forget(Session* session);

  // Folds the buffered increments into the keyspace now and fills the holes of every session
  // that queued one. Called at the end of each turn, and by a session that needs to see the
  // increments before its next command.
  void FoldIncrements();

 private:
  WorkerStats stats_;
  engine::IncrementBuffer increments_;
  std::vector<Session*> awaiting_;  // sessions with holes, in the order they queued
};

}  // namespace tally::redis
