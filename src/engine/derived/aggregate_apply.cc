#include "engine/derived/aggregate_apply.h"

#include <fmt/format.h>

#include "core/integer.h"
#include "engine/derived/aggregate_state.h"
#include "engine/derived/apply.h"

namespace tally::derived {

namespace defs = tally::definitions;

namespace {

tl::unexpected<Error> OutOfRange(const Family& family, std::string_view key) {
  return MakeError(ErrorCode::kOverflow,
                   fmt::format("counter {}: the push would take {} out of the int64 range",
                               family.counter.name(), key.substr(0, 128)));
}

}  // namespace

void StateWrites::Take(std::span<const defs::RecordDelta> deltas,
                       std::span<Family* const> families) {
  deltas_ = deltas;
  families_ = families;
  record_keys_.resize(deltas.size());
  for (size_t j = 0; j < deltas.size(); ++j) {
    const defs::RecordDelta& delta = deltas[j];
    std::string& record = record_keys_[j];
    record.clear();
    if (delta.kind != defs::RecordKind::kRows) {
      record = RecordKey(delta.group, delta.aggregate, delta.kind, delta.value);
    }
  }
}

void StateWrites::AddKeys(std::vector<engine::HashedKey>* keys) const {
  for (size_t j = 0; j < deltas_.size(); ++j) {
    keys->emplace_back(deltas_[j].group);
    if (!record_keys_[j].empty()) keys->emplace_back(record_keys_[j]);
  }
}

Status StateWrites::Plan(engine::View& view, const std::function<bool(size_t)>& due) {
  records_.clear();
  groups_.clear();
  record_index_.clear();
  group_index_.clear();
  // Sum per group and per record.
  for (size_t j = 0; j < deltas_.size(); ++j) {
    if (!due(j)) continue;
    const defs::RecordDelta& delta = deltas_[j];
    auto [group_at, new_group] = group_index_.try_emplace(Absl(delta.group), groups_.size());
    if (new_group) groups_.push_back(GroupPlan{families_[j], delta.group, 0, 0, {}});
    GroupPlan& group = groups_[group_at->second];
    if (delta.kind == defs::RecordKind::kRows) {
      const std::optional<int64_t> rows = CheckedAdd(group.rows, delta.delta);
      if (!rows) return OutOfRange(*group.family, delta.group);
      group.rows = *rows;
      continue;
    }
    auto [record_at, new_record] =
        record_index_.try_emplace(Absl(record_keys_[j]), records_.size());
    if (new_record) {
      records_.push_back(RecordPlan{j});
      group.records.push_back(record_at->second);
    }
    RecordPlan& record = records_[record_at->second];
    const std::optional<int64_t> sum = CheckedAdd(record.sum, delta.delta);
    if (!sum) return OutOfRange(*group.family, delta.group);
    record.sum = *sum;
  }
  // The new values, from the mirror (the records) and K (a composite group's rows).
  for (GroupPlan& group : groups_) {
    Family& family = *group.family;
    if (family.counter.layout() == defs::Layout::kComposite) {
      const int64_t rows = view.Get(engine::HashedKey(group.group)).value_or(0);
      const std::optional<int64_t> new_rows = CheckedAdd(rows, group.rows);
      if (!new_rows) return OutOfRange(family, group.group);
      group.new_rows = *new_rows;
    }
    std::lock_guard lock(family.mutex);
    for (const size_t index : group.records) {
      RecordPlan& record = records_[index];
      const defs::RecordDelta& names = deltas_[record.delta];
      const int64_t current =
          family.states->Record(names.group, names.aggregate, names.kind, names.value);
      const std::optional<int64_t> value = CheckedAdd(current, record.sum);
      if (!value) return OutOfRange(family, group.group);
      record.value = *value;
    }
  }
  return OkStatus();
}

void StateWrites::Write(engine::View& view, PushOutcome* outcome) {
  for (const GroupPlan& group : groups_) {
    Family& family = *group.family;
    std::lock_guard lock(family.mutex);
    GroupStates& states = *family.states;
    for (const size_t index : group.records) {
      const RecordPlan& record = records_[index];
      if (record.sum == 0) continue;
      const defs::RecordDelta& names = deltas_[record.delta];
      states.SetRecord(names.group, names.aggregate, names.kind, names.value, record.value);
      const engine::HashedKey key(record_keys_[record.delta]);
      if (record.value == 0) {
        view.Delete(key);
      } else {
        view.Set(key, record.value, engine::SetOptions{});
      }
    }
    // K, written even when its value stays: its epoch covers the group (aggregate_state.h).
    const int64_t k_value = family.counter.layout() == defs::Layout::kComposite
                                ? group.new_rows
                                : states.Present(group.group, 0);
    const engine::HashedKey key(group.group);
    if (k_value == 0 && states.Find(group.group) == nullptr) {
      view.Delete(key);
      family.RemoveKey(group.group);
    } else {
      view.Set(key, k_value, engine::SetOptions{});
      if (!family.keys.contains(Absl(group.group))) family.AddKey(group.group);
    }
    family.version.fetch_add(1, std::memory_order_relaxed);
    ++outcome->increments;
  }
}

}  // namespace tally::derived
