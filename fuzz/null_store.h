// A Persistence for the fuzzers that run an Engine and DerivedCounters: every write succeeds
// and is forgotten, and a load finds an empty store. The fuzzers never restart, and the
// catalog is read only by a load, at start, so nothing is ever read back. Forgetting keeps
// a long campaign's memory flat. Thread-safe: it keeps no state.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/persistence.h"

namespace tally::fuzz {

class NullStore final : public engine::Persistence {
 public:
  Status Commit(const engine::CommitBatch&, bool) override { return OkStatus(); }
  Status Sync() override { return OkStatus(); }
  Status Load(engine::LoadVisitor&) override { return OkStatus(); }
  Result<uint64_t> BeginCheckpoint() override { return 0; }
  Status CheckpointWrite(const engine::CommitBatch&) override { return OkStatus(); }
  Status FinishCheckpoint(uint64_t) override { return OkStatus(); }
  Status WriteCatalog(std::span<const CatalogOp>) override { return OkStatus(); }
  Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog() override {
    return std::vector<std::pair<std::string, std::string>>();
  }
};

}  // namespace tally::fuzz
