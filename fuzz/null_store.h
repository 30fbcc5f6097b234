// An in-memory Persistence for the fuzzers that run an Engine and DerivedCounters: commits
// succeed and are forgotten (the fuzzers never restart), the catalog is kept in a map so that
// definitions work as with RocksDB. Thread-safe, as the committer calls it from its thread.
#pragma once

#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/persistence.h"

namespace tally::fuzz {

class MemoryStore final : public engine::Persistence {
 public:
  Status Commit(const engine::CommitBatch&, bool) override { return OkStatus(); }
  Status Sync() override { return OkStatus(); }
  Status Load(engine::LoadVisitor&) override { return OkStatus(); }
  Result<uint64_t> BeginCheckpoint() override { return 0; }
  Status CheckpointWrite(const engine::CommitBatch&) override { return OkStatus(); }
  Status FinishCheckpoint(uint64_t) override { return OkStatus(); }

  Status WriteCatalog(std::span<const CatalogOp> ops) override {
    std::lock_guard lock(mutex_);
    for (const CatalogOp& op : ops) {
      if (op.value) {
        catalog_[op.name] = *op.value;
      } else {
        catalog_.erase(op.name);
      }
    }
    return OkStatus();
  }
  Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog() override {
    std::lock_guard lock(mutex_);
    return std::vector<std::pair<std::string, std::string>>(catalog_.begin(), catalog_.end());
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> catalog_;
};

}  // namespace tally::fuzz
