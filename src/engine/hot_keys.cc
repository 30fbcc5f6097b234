#include "engine/hot_keys.h"

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <chrono>

namespace tally::engine {
namespace {

// Most first, then by key, so that equal counts list in a stable order.
bool MoreWrites(const KeyWrites& a, const KeyWrites& b) {
  return a.writes != b.writes ? a.writes > b.writes : a.key < b.key;
}

int64_t SecondOf(int64_t ms) { return ms >= 0 ? ms / 1000 : (ms - 999) / 1000; }

}  // namespace

HotKeys::HotKeys(Keyspace* keyspace)
    : keyspace_(keyspace),
      started_ms_(keyspace->clock()->NowMillis()),
      ticker_(
          std::chrono::seconds(1), [this] { Tick(); }, "hot keys") {}

HotKeys::~HotKeys() { Stop(); }

void HotKeys::Start() {
  if (ticker_.running()) return;
  {
    std::lock_guard lock(mutex_);
    scratch_.clear();
    keyspace_->TakeWriteSamples(&scratch_);  // written before the start: not measured
    scratch_.clear();
    windows_.clear();
    started_ms_ = keyspace_->clock()->NowMillis();
  }
  ticker_.Start();
}

void HotKeys::Stop() { ticker_.Stop(); }

void HotKeys::Tick() {
  const int64_t second = SecondOf(keyspace_->clock()->NowMillis());
  std::lock_guard lock(mutex_);
  scratch_.clear();
  keyspace_->TakeWriteSamples(&scratch_);
  while (!windows_.empty() && windows_.front().second <= second - kWindowSeconds) {
    windows_.pop_front();
  }
  if (scratch_.empty()) return;
  if (windows_.empty() || windows_.back().second != second) windows_.push_back({second, {}});
  std::vector<KeyWrites>& keys = windows_.back().keys;
  // A key may come from this tick and an earlier one of the same second: sum them. The
  // index holds views of the keys: reserved first, so that no push_back moves them.
  keys.reserve(keys.size() + scratch_.size());
  absl::flat_hash_map<std::string_view, size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) index.emplace(keys[i].key, i);
  for (KeyWrites& sample : scratch_) {
    if (auto it = index.find(sample.key); it != index.end()) {
      keys[it->second].writes += sample.writes;
    } else {
      keys.push_back(std::move(sample));
      index.emplace(keys.back().key, keys.size() - 1);
    }
  }
  if (keys.size() > kKeptPerWindow) {
    std::ranges::partial_sort(keys, keys.begin() + kKeptPerWindow, MoreWrites);
    keys.resize(kKeptPerWindow);
  }
}

std::vector<HotKey> HotKeys::Top(size_t n,
                                 const std::function<bool(std::string_view)>& hide) const {
  const int64_t now_ms = keyspace_->clock()->NowMillis();
  const int64_t second = SecondOf(now_ms);
  absl::flat_hash_map<std::string, uint64_t> sums;
  int64_t started_ms = 0;
  {
    std::lock_guard lock(mutex_);
    started_ms = started_ms_;
    for (const Window& window : windows_) {
      if (window.second <= second - kWindowSeconds) continue;
      for (const KeyWrites& key : window.keys) {
        if (!hide || !hide(key.key)) sums[key.key] += key.writes;
      }
    }
  }
  std::vector<KeyWrites> ranked;
  ranked.reserve(sums.size());
  for (auto& [key, writes] : sums) ranked.push_back({key, writes});
  const size_t kept = std::min(n, ranked.size());
  std::ranges::partial_sort(ranked, ranked.begin() + static_cast<std::ptrdiff_t>(kept), MoreWrites);
  // The seconds the windows cover: since the start, at most the window, at least one.
  const double seconds = std::clamp(static_cast<double>(now_ms - started_ms) / 1000.0, 1.0,
                                    static_cast<double>(kWindowSeconds));
  std::vector<HotKey> top;
  top.reserve(kept);
  for (size_t i = 0; i < kept; ++i) {
    top.push_back({std::move(ranked[i].key), ranked[i].writes,
                   static_cast<double>(ranked[i].writes) / seconds});
  }
  return top;
}

}  // namespace tally::engine
