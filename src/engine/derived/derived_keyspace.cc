#include "engine/derived/derived_keyspace.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace tally::derived {

namespace {

// Calls visit(view, key) for every key, a chunk of keys at a time under one View of their
// stripes. Returns the newest commit epoch the visits depend on.
template <typename Visit>
uint64_t VisitInChunks(engine::Keyspace& keyspace, std::span<const std::string> keys,
                       Visit&& visit) {
  uint64_t epoch = 0;
  std::vector<engine::HashedKey> hashed;
  for (size_t begin = 0; begin < keys.size(); begin += kChunk) {
    const size_t end = std::min(keys.size(), begin + kChunk);
    hashed.clear();
    for (size_t i = begin; i < end; ++i) hashed.emplace_back(keys[i]);
    engine::View view = keyspace.Lock(hashed);
    for (const engine::HashedKey& key : hashed) visit(view, key);
    epoch = std::max(epoch, view.required_epoch());
  }
  return epoch;
}

std::string Prefixed(std::string_view prefix, std::string_view name) {
  std::string key(prefix);
  key.append(name);
  return key;
}

}  // namespace

std::string MarkerKey(std::string_view id) { return Prefixed(kIdMarkerPrefix, id); }

std::string PositionKey(std::string_view name) { return Prefixed(kPositionPrefix, name); }

std::string_view FamilyName(std::string_view key) { return key.substr(0, key.find(':')); }

std::vector<int64_t> DerivedKeyspace::Get(std::span<const std::string> keys,
                                          uint64_t* required_epoch) {
  std::vector<int64_t> values;
  values.reserve(keys.size());
  const uint64_t epoch =
      VisitInChunks(keyspace(), keys, [&](engine::View& view, const engine::HashedKey& key) {
        values.push_back(view.Get(key).value_or(0));
      });
  *required_epoch = std::max(*required_epoch, epoch);
  return values;
}

void DerivedKeyspace::DeleteKeys(std::span<const std::string> keys) {
  WaitDurable(VisitInChunks(keyspace(), keys, [](engine::View& view, const engine::HashedKey& key) {
    view.Delete(key);
  }));
}

void DerivedKeyspace::DeleteGroups(Family& family) {
  std::vector<std::string> keys;
  {
    std::lock_guard lock(family.mutex);
    keys.assign(family.keys.begin(), family.keys.end());
    family.ClearKeys();
  }
  DeleteKeys(keys);
}

Result<uint64_t> DerivedKeyspace::SetGroups(Family& family, std::span<const KeyValue> values) {
  std::vector<engine::HashedKey> hashed;
  for (const KeyValue& item : values) {
    if (!family.IsGroupKey(item.key)) {
      return InvalidArgument(fmt::format("key '{}' is not a group of counter {}",
                                         item.key.substr(0, 128), family.counter.name()));
    }
    hashed.emplace_back(item.key);
  }
  engine::View view = keyspace().Lock(hashed);
  for (size_t i = 0; i < values.size(); ++i) {
    std::lock_guard lock(family.mutex);
    if (values[i].value == 0) {
      view.Delete(hashed[i]);
      family.RemoveKey(values[i].key);
    } else {
      view.Set(hashed[i], values[i].value, engine::SetOptions{});
      family.AddKey(values[i].key);
    }
  }
  family.version.fetch_add(1, std::memory_order_relaxed);
  return view.required_epoch();
}

int64_t DerivedKeyspace::Position(std::string_view name) {
  const std::string key = PositionKey(name);
  const engine::HashedKey hashed(key);
  engine::View view = keyspace().Lock(hashed);
  return view.Get(hashed).value_or(0);
}

void DerivedKeyspace::ForgetPosition(std::string_view name) {
  const std::string key = PositionKey(name);
  const engine::HashedKey hashed(key);
  uint64_t epoch = 0;
  {
    engine::View view = keyspace().Lock(hashed);
    view.Delete(hashed);
    epoch = view.required_epoch();
  }
  WaitDurable(epoch);
}

void DerivedKeyspace::WaitDurable(uint64_t epoch) {
  if (epoch == 0) return;
  engine_.committer().WaitDurable(epoch);
  if (engine_.durability() == engine::Durability::kAsync) {
    if (auto status = store_.Sync(); !status) spdlog::error("sync: {}", status.error().message);
  }
}

}  // namespace tally::derived
