#include "engine/engine.h"

#include <spdlog/spdlog.h>

namespace tally::engine {

Engine::Engine(Persistence* persistence, EngineOptions options)
    : persistence_(persistence),
      keyspace_(options.clock),
      committer_(&keyspace_, persistence, options.commit),
      hot_keys_(&keyspace_) {
  keyspace_.set_on_write([this] { committer_.RequestCommit(); });
}

Engine::~Engine() { Stop(); }

namespace {

// Feeds the stored state into the keyspace and counts what it loaded.
class KeyspaceLoader final : public LoadVisitor {
 public:
  explicit KeyspaceLoader(Keyspace* keyspace) : keyspace_(keyspace) {}
  void Put(std::string_view key, const CounterRecord& record, LoadSource source) override {
    keyspace_->LoadPut(key, record, source);
  }
  void Delete(std::string_view key, LoadSource source) override {
    keyspace_->LoadDelete(key, source);
  }
  void ClearAll(LoadSource source) override { keyspace_->LoadClear(source); }

 private:
  Keyspace* keyspace_;
};

}  // namespace

Status Engine::Start() {
  KeyspaceLoader loader(&keyspace_);
  if (auto status = persistence_->Load(loader); !status) return status;
  loaded_counters_ = keyspace_.size();
  spdlog::info("loaded {} counters", loaded_counters_);
  committer_.Start();
  hot_keys_.Start();
  return OkStatus();
}

void Engine::Stop() {
  hot_keys_.Stop();
  committer_.Stop();
}

}  // namespace tally::engine
