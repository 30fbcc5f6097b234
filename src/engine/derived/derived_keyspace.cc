#include "engine/derived/derived_keyspace.h"

#include <absl/container/flat_hash_set.h>
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

// Writes one group's checked state under `view` (which holds its key, `new_keys`, the keys of
// state.records in order, and `old_keys`, its current records), keeping the mirror and the
// index in step. REQUIRES: family.mutex held.
void WriteGroupState(engine::View& view, Family& family, const GroupStateValue& state,
                     std::span<const std::string> new_keys, std::span<const std::string> old_keys) {
  GroupStates& mirror = *family.states;
  for (size_t j = 0; j < state.records.size(); ++j) {
    const GroupStateValue::Record& record = state.records[j];
    const std::optional<definitions::RecordTag> tag = definitions::ParseRecordTag(record.tag);
    mirror.SetRecord(state.key, tag->aggregate, tag->kind, tag->value, record.value);
    view.Set(engine::HashedKey(new_keys[j]), record.value, engine::SetOptions{});
  }
  const absl::flat_hash_set<absl::string_view> kept(new_keys.begin(), new_keys.end());
  for (const std::string& key : old_keys) {
    if (kept.contains(Absl(key))) continue;
    const std::optional<RecordName> name = ParseRecordKey(key);
    mirror.SetRecord(state.key, name->aggregate, name->kind, name->value, 0);
    view.Delete(engine::HashedKey(key));
  }
  // K, written even when its value stays: its epoch covers the group (aggregate_state.h).
  const engine::HashedKey key(state.key);
  if (state.value == 0 && mirror.Find(state.key) == nullptr) {
    view.Delete(key);
    family.RemoveKey(state.key);
  } else {
    view.Set(key, state.value, engine::SetOptions{});
    if (!family.keys.contains(Absl(state.key))) family.AddKey(state.key);
  }
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

std::vector<KeyValue> DerivedKeyspace::ReadGroups(Family& family, std::span<const std::string> keys,
                                                  uint64_t* required_epoch) {
  const bool integer = definitions::ShowsInteger(family.counter);
  std::vector<KeyValue> groups;
  groups.reserve(keys.size());
  VisitGroups(family, keys, required_epoch,
              [&](size_t i, int64_t value, const GroupStates* states) {
                KeyValue& group = groups.emplace_back();
                group.key = keys[i];
                group.value = value;
                if (integer) return;
                group.shown = states == nullptr ? definitions::ShowPlain(family.counter, value)
                                                : states->Show(group.key, value);
              });
  return groups;
}

void DerivedKeyspace::VisitGroups(Family& family, std::span<const std::string> keys,
                                  uint64_t* required_epoch, const GroupVisit& visit) {
  size_t i = 0;
  const uint64_t epoch =
      VisitInChunks(keyspace(), keys, [&](engine::View& view, const engine::HashedKey& key) {
        const int64_t value = view.Get(key).value_or(0);
        if (family.states == nullptr) return visit(i++, value, nullptr);
        std::lock_guard lock(family.mutex);
        visit(i++, value, family.states.get());
      });
  *required_epoch = std::max(*required_epoch, epoch);
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
    for (const std::string& key : family.keys) family.AppendRecordKeys(key, &keys);
    family.ClearKeys();
  }
  DeleteKeys(keys);
}

Result<uint64_t> DerivedKeyspace::SetGroups(Family& family, std::span<const KeyValue> values) {
  if (family.states != nullptr) {
    // Its groups are more than one number each: their records are set too.
    return InvalidArgument(fmt::format(
        "counter {} keeps {}: its groups are set with their records (COUNTER.REPAIRSTATE)",
        family.counter.name(),
        family.counter.layout() == definitions::Layout::kDistinct
            ? "the rows of each distinct value"
            : "several values per group"));
  }
  std::vector<engine::HashedKey> hashed;
  for (const KeyValue& item : values) {
    if (auto s = family.CheckGroupKey(item.key); !s) return tl::unexpected(s.error());
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

Result<uint64_t> DerivedKeyspace::SetGroupStates(Family& family,
                                                 std::span<const GroupStateValue> states) {
  if (family.states == nullptr) {
    return InvalidArgument(fmt::format(
        "counter {} keeps one number per group, no records: COUNTER.REPAIR sets its groups",
        family.counter.name()));
  }
  // Everything is checked before anything is written; each group's new record keys.
  absl::flat_hash_set<absl::string_view> groups;
  std::vector<std::vector<std::string>> new_keys(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    const GroupStateValue& state = states[i];
    if (auto s = family.CheckGroupKey(state.key); !s) return tl::unexpected(s.error());
    if (!groups.insert(Absl(state.key)).second) {
      return InvalidArgument(fmt::format("group {} of counter {} is given twice",
                                         state.key.substr(0, 128), family.counter.name()));
    }
    if (auto s = CheckGroupState(family.counter, state); !s) return tl::unexpected(s.error());
    for (const GroupStateValue::Record& record : state.records) {
      const std::optional<definitions::RecordTag> tag = definitions::ParseRecordTag(record.tag);
      new_keys[i].push_back(RecordKey(state.key, tag->aggregate, tag->kind, tag->value));
    }
  }
  // The View must hold each group's current records, which only a writer of the group's key
  // changes: read them, lock, and read them again under the lock; should a batch have
  // changed them in between, lock again with the new ones.
  std::vector<std::vector<std::string>> old_keys(states.size());
  std::vector<std::string> current;
  std::vector<engine::HashedKey> hashed;
  for (;;) {
    {
      std::lock_guard lock(family.mutex);
      for (size_t i = 0; i < states.size(); ++i) {
        old_keys[i].clear();
        family.AppendRecordKeys(states[i].key, &old_keys[i]);
      }
    }
    hashed.clear();
    for (size_t i = 0; i < states.size(); ++i) {
      hashed.emplace_back(states[i].key);
      for (const std::string& key : old_keys[i]) hashed.emplace_back(key);
      for (const std::string& key : new_keys[i]) hashed.emplace_back(key);
    }
    engine::View view = keyspace().Lock(hashed);
    std::lock_guard lock(family.mutex);
    bool moved = false;
    for (size_t i = 0; i < states.size() && !moved; ++i) {
      current.clear();
      family.AppendRecordKeys(states[i].key, &current);
      moved = current != old_keys[i];
    }
    if (moved) continue;
    for (size_t i = 0; i < states.size(); ++i) {
      WriteGroupState(view, family, states[i], new_keys[i], old_keys[i]);
    }
    family.version.fetch_add(1, std::memory_order_relaxed);
    return view.required_epoch();
  }
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
