#include "engine/derived/family.h"

#include <fmt/format.h>

namespace tally::derived {

std::string_view CounterStateName(CounterState state) {
  switch (state) {
    case CounterState::kCounting:
      return "counting";
    case CounterState::kPending:
      return "pending";
    case CounterState::kBackfilling:
      return "backfilling";
  }
  return "counting";
}

CounterState Family::state() const {
  if (start == kPendingStart) return CounterState::kPending;
  if (backfilling.load(std::memory_order_acquire)) return CounterState::kBackfilling;
  return CounterState::kCounting;
}

bool Family::IsGroupKey(std::string_view key) const {
  const std::string& name = counter.name();
  if (counter.key_columns().empty()) return key == name;
  return key.size() > name.size() && key.starts_with(name) && key[name.size()] == ':';
}

Status Family::CheckGroupKey(std::string_view key) const {
  if (IsGroupKey(key)) return OkStatus();
  return InvalidArgument(
      fmt::format("key '{}' is not a group of counter {}", key.substr(0, 128), counter.name()));
}

void Family::AddKey(std::string_view key) {
  if (counter.retention()) {
    if (const std::optional<int64_t> bucket = counter.BucketOfKey(key)) {
      by_bucket.emplace(*bucket, std::string(key));
    }
  }
  keys.emplace(key);
}

void Family::RemoveKey(std::string_view key) {
  if (counter.retention()) {
    if (const std::optional<int64_t> bucket = counter.BucketOfKey(key)) {
      by_bucket.erase(std::pair<int64_t, std::string>(*bucket, key));
    }
  }
  keys.erase(Absl(key));
  if (states != nullptr) states->Erase(key);
}

void Family::AppendRecordKeys(std::string_view key, std::vector<std::string>* out) const {
  if (states != nullptr) states->RecordKeysOf(key, out);
}

void Family::ClearKeys() {
  keys.clear();
  by_bucket.clear();
  top_cache.clear();
  if (states != nullptr) states->Clear();
}

}  // namespace tally::derived
