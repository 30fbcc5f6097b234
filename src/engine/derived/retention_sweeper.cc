#include "engine/derived/retention_sweeper.h"

#include <algorithm>
#include <vector>

#include "engine/derived/derived_keyspace.h"

namespace tally::derived {

RetentionSweeper::Swept RetentionSweeper::Sweep(const CatalogSnapshot& catalog, size_t budget) {
  std::lock_guard sweeping(mutex_);
  Swept swept;
  const int64_t now = keyspace_.clock()->NowMillis() * 1000;
  // The families with a retention by name, taken in turn from the one after the family
  // the previous sweep last removed from: one with more expired groups than the budget
  // cannot keep the others waiting.
  std::vector<Family*> families;
  for (const auto& [name, family] : catalog.counters) {
    if (family->counter.retention()) families.push_back(family.get());
  }
  auto name_of = [](const Family* f) -> const std::string& { return f->counter.name(); };
  std::ranges::sort(families, {}, name_of);
  const auto after = std::ranges::upper_bound(families, sweep_after_, {}, name_of);
  const size_t first = static_cast<size_t>(after - families.begin());
  std::vector<std::string> expired;
  std::vector<std::string> records;
  std::vector<engine::HashedKey> hashed;
  for (size_t turn = 0; turn < families.size() && swept.removed < budget; ++turn) {
    Family& family = *families[(first + turn) % families.size()];
    while (swept.removed < budget) {
      // The oldest groups first, a chunk at a time; the first live bucket ends the family.
      expired.clear();
      {
        std::lock_guard lock(family.mutex);
        const size_t most = std::min(kChunk, budget - swept.removed);
        for (auto it = family.by_bucket.begin();
             it != family.by_bucket.end() && expired.size() < most; ++it) {
          if (!family.counter.Expired(it->first, now)) break;
          expired.push_back(it->second);
        }
      }
      if (expired.empty()) break;
      // The groups' hidden records go with them (aggregate_state.h).
      records.clear();
      {
        std::lock_guard lock(family.mutex);
        for (const std::string& key : expired) family.AppendRecordKeys(key, &records);
      }
      hashed.clear();
      for (const std::string& key : expired) hashed.emplace_back(key);
      for (const std::string& key : records) hashed.emplace_back(key);
      engine::View view = keyspace_.Lock(hashed);
      for (const engine::HashedKey& key : hashed) view.Delete(key);
      {
        std::lock_guard lock(family.mutex);
        for (const std::string& key : expired) family.RemoveKey(key);
      }
      family.version.fetch_add(1, std::memory_order_relaxed);
      swept.required_epoch = std::max(swept.required_epoch, view.required_epoch());
      swept.removed += expired.size();
      sweep_after_ = family.counter.name();
    }
  }
  return swept;
}

}  // namespace tally::derived
