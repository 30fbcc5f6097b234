// Engine: the one API that tally's servers speak to. It owns the keyspace of counters and
// the group committer, loads the stored counters at start and commits the rest at stop.
// Protocol adapters (Redis, HTTP) call the keyspace through Views and IncrementBuffers and
// hold each reply until the epoch it depends on is durable (in sync mode).
#pragma once

#include <functional>
#include <memory>

#include "core/clock.h"
#include "core/status.h"
#include "engine/committer.h"
#include "engine/hot_keys.h"
#include "engine/increment_buffer.h"
#include "engine/keyspace.h"

namespace tally::engine {

struct EngineOptions {
  CommitterOptions commit;
  const Clock* clock = SystemClock::Default();
};

class Engine {
 public:
  // `persistence` must outlive the engine.
  Engine(Persistence* persistence, EngineOptions options);
  ~Engine();

  // Loads every stored counter and starts the committer and the hot-key sampler.
  Status Start();

  // Commits and fsyncs everything written so far, then stops the committer.
  void Stop();

  Keyspace& keyspace() { return keyspace_; }
  Committer& committer() { return committer_; }
  const HotKeys& hot_keys() const { return hot_keys_; }

  // True when a reply depending on `epoch` may be sent now.
  bool IsDurable(uint64_t epoch) const {
    return committer_.durability() == Durability::kAsync || committer_.durable_epoch() >= epoch;
  }
  Durability durability() const { return committer_.durability(); }
  PersistenceStats persistence_stats() const { return persistence_->stats(); }
  size_t loaded_counters() const { return loaded_counters_; }

 private:
  Persistence* const persistence_;
  Keyspace keyspace_;
  Committer committer_;
  HotKeys hot_keys_;
  size_t loaded_counters_ = 0;
};

}  // namespace tally::engine
