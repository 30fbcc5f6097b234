#include "engine/derived/aggregate_state.h"

#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>

#include <charconv>

#include "core/absl_string.h"
#include "core/escape.h"
#include "core/integer.h"
#include "engine/definitions/numeric.h"

namespace tally::derived {

namespace defs = tally::definitions;

namespace {

// The first value with rows above 0, from the front (min) or the back (max); nullptr when
// none. Values with rows at or below 0 exist only between changes that do not add up.
const std::string* Extreme(const AggregateState& state, bool from_back) {
  if (from_back) {
    for (auto it = state.values.rbegin(); it != state.values.rend(); ++it) {
      if (it->second > 0) return &it->first;
    }
  } else {
    for (const auto& [value, rows] : state.values) {
      if (rows > 0) return &value;
    }
  }
  return nullptr;
}

}  // namespace

std::string RecordKey(std::string_view group, uint32_t aggregate, defs::RecordKind kind,
                      std::string_view value) {
  std::string key(kRecordPrefix);
  key += fmt::format("{}:", group.size());
  key.append(group);
  defs::AppendRecordTag(aggregate, kind, value, &key);
  return key;
}

std::optional<RecordName> ParseRecordKey(std::string_view key) {
  if (!key.starts_with(kRecordPrefix)) return std::nullopt;
  std::string_view rest = key.substr(kRecordPrefix.size());
  size_t length = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), length);
  if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != ':') {
    return std::nullopt;
  }
  rest.remove_prefix(static_cast<size_t>(end - rest.data()) + 1);
  if (length > rest.size()) return std::nullopt;
  const std::optional<defs::RecordTag> tag = defs::ParseRecordTag(rest.substr(length));
  if (!tag) return std::nullopt;
  return RecordName{rest.substr(0, length), tag->aggregate, tag->kind, tag->value};
}

namespace {

// A tag for a message: its first 64 bytes, binary bytes as \xNN.
std::string Printable(std::string_view tag) {
  std::string out;
  AppendPrintable(tag.substr(0, 64), KeepUtf8::kYes, &out);
  return out;
}

}  // namespace

Status CheckGroupState(const defs::CompiledCounter& counter, const GroupStateValue& state) {
  const auto refused = [&](std::string_view why) {
    return InvalidArgument(
        fmt::format("counter {}, group {}: {}", counter.name(), state.key.substr(0, 128), why));
  };
  const bool composite = counter.layout() == defs::Layout::kComposite;
  // Per aggregate: whether it has a sum and a count, and the rows of its values (each at
  // most K's, so their sum is checked without overflow).
  struct Seen {
    bool sum = false;
    bool count = false;
    int64_t value_rows = 0;
  };
  if (composite && state.value < 0) return refused("a group's rows are never below 0");
  if (composite && state.value == 0 && !state.records.empty()) {
    return refused("a group without rows has no records");
  }
  std::vector<Seen> seen(counter.aggregates().size());
  absl::flat_hash_set<absl::string_view> tags;
  for (const GroupStateValue::Record& record : state.records) {
    const std::optional<defs::RecordTag> tag = defs::ParseRecordTag(record.tag);
    if (!tag) {
      return refused(fmt::format("'{}' is not a record tag (<i>s, <i>n or <i>v<value bytes>)",
                                 Printable(record.tag)));
    }
    if (auto s = defs::CheckRecordTag(counter, *tag); !s) return refused(s.error().message);
    if (!tags.insert(Absl(record.tag)).second) {
      return refused(fmt::format("record {} is given twice", Printable(record.tag)));
    }
    if (record.value == 0) return refused("a record is never 0 (leave it out)");
    Seen& slot = seen[tag->aggregate];
    if (tag->kind == defs::RecordKind::kSum) {
      slot.sum = true;
      continue;
    }
    if (record.value < 0) return refused("a record of rows must be above 0");
    if (composite && record.value > state.value) {
      return refused(fmt::format("a record counts {} rows, more than the group's {}", record.value,
                                 state.value));
    }
    if (tag->kind == defs::RecordKind::kCount) {
      slot.count = true;
    } else {
      slot.value_rows += record.value;
      if (composite && slot.value_rows > state.value) {
        return refused(fmt::format("the values of aggregate {} count more rows than the group's {}",
                                   tag->aggregate, state.value));
      }
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i].sum && !seen[i].count) {
      return refused(fmt::format("aggregate {} has a sum without its count", i));
    }
  }
  if (!composite && state.value != static_cast<int64_t>(state.records.size())) {
    return refused(fmt::format("its value {} is not its number of distinct values, {}", state.value,
                               state.records.size()));
  }
  return OkStatus();
}

const GroupState* GroupStates::Find(std::string_view group) const {
  const auto it = groups_.find(Absl(group));
  return it == groups_.end() ? nullptr : &it->second;
}

int64_t GroupStates::Record(std::string_view group, uint32_t aggregate, defs::RecordKind kind,
                            std::string_view value) const {
  const GroupState* state = Find(group);
  if (state == nullptr || aggregate >= state->aggregates.size()) return 0;
  const AggregateState& slot = state->aggregates[aggregate];
  switch (kind) {
    case defs::RecordKind::kSum:
      return slot.sum;
    case defs::RecordKind::kCount:
      return slot.count;
    case defs::RecordKind::kValue: {
      const auto it = slot.values.find(Absl(value));
      return it == slot.values.end() ? 0 : it->second;
    }
    case defs::RecordKind::kRows:
      break;
  }
  return 0;
}

GroupState& GroupStates::Slot(std::string_view group) {
  auto [it, inserted] = groups_.try_emplace(Absl(group));
  if (inserted) it->second.aggregates.resize(counter_.aggregates().size());
  return it->second;
}

void GroupStates::SetRecord(std::string_view group, uint32_t aggregate, defs::RecordKind kind,
                            std::string_view value, int64_t new_value) {
  if (new_value == 0 && Record(group, aggregate, kind, value) == 0) return;
  GroupState& state = Slot(group);
  AggregateState& slot = state.aggregates[aggregate];
  int64_t old_value = 0;
  switch (kind) {
    case defs::RecordKind::kSum:
      old_value = std::exchange(slot.sum, new_value);
      break;
    case defs::RecordKind::kCount:
      old_value = std::exchange(slot.count, new_value);
      break;
    case defs::RecordKind::kValue: {
      auto it = slot.values.find(Absl(value));
      if (it != slot.values.end()) old_value = it->second;
      if (new_value == 0) {
        slot.values.erase(it);
      } else if (it == slot.values.end()) {
        slot.values.emplace(std::string(value), new_value);
      } else {
        it->second = new_value;
      }
      slot.present += (new_value > 0 ? 1 : 0) - (old_value > 0 ? 1 : 0);
      break;
    }
    case defs::RecordKind::kRows:
      return;
  }
  state.records += (new_value != 0 ? 1 : 0);
  state.records -= (old_value != 0 ? 1 : 0);
  if (state.records == 0) groups_.erase(Absl(group));
}

int64_t GroupStates::Present(std::string_view group, uint32_t aggregate) const {
  const GroupState* state = Find(group);
  return state == nullptr ? 0 : state->aggregates[aggregate].present;
}

void GroupStates::RecordKeysOf(std::string_view group, std::vector<std::string>* out) const {
  const GroupState* state = Find(group);
  if (state == nullptr) return;
  for (uint32_t i = 0; i < state->aggregates.size(); ++i) {
    const AggregateState& slot = state->aggregates[i];
    if (slot.sum != 0) out->push_back(RecordKey(group, i, defs::RecordKind::kSum, {}));
    if (slot.count != 0) out->push_back(RecordKey(group, i, defs::RecordKind::kCount, {}));
    for (const auto& [value, rows] : slot.values) {
      out->push_back(RecordKey(group, i, defs::RecordKind::kValue, value));
    }
  }
}

void GroupStates::Erase(std::string_view group) { groups_.erase(Absl(group)); }

void GroupStates::Clear() { groups_.clear(); }

defs::GroupValue GroupStates::Show(std::string_view group, int64_t k_value) const {
  return ShowGroup(counter_, Find(group), k_value);
}

defs::GroupValue ShowGroup(const defs::CompiledCounter& counter, const GroupState* state,
                           int64_t k_value) {
  const std::vector<defs::AggregateColumn>& columns = counter.aggregates();
  if (counter.layout() == defs::Layout::kDistinct) {
    return {defs::AggregateValue::Integer(k_value)};
  }
  static const AggregateState kEmpty;
  defs::GroupValue out;
  out.reserve(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    const defs::AggregateColumn& column = columns[i];
    const AggregateState& slot = state != nullptr ? state->aggregates[i] : kEmpty;
    switch (column.kind) {
      case defs::Aggregate::kCountStar:
        out.push_back(defs::AggregateValue::Integer(k_value));
        break;
      case defs::Aggregate::kCount:
        out.push_back(defs::AggregateValue::Integer(slot.count));
        break;
      case defs::Aggregate::kSum:
        out.push_back(slot.count == 0 ? defs::AggregateValue::Null()
                                      : defs::ShowTotal(column, slot.sum));
        break;
      case defs::Aggregate::kAvg:
        out.push_back(defs::ShowAverage(column, slot.sum, slot.count));
        break;
      case defs::Aggregate::kCountDistinct:
        out.push_back(defs::AggregateValue::Integer(slot.present));
        break;
      case defs::Aggregate::kMin:
      case defs::Aggregate::kMax: {
        const std::string* extreme = Extreme(slot, column.kind == defs::Aggregate::kMax);
        out.push_back(extreme == nullptr ? defs::AggregateValue::Null()
                                         : defs::ShowValueBytes(column, *extreme));
        break;
      }
    }
  }
  return out;
}

GroupCombination::GroupCombination(const defs::CompiledCounter& counter) : counter_(counter) {
  combined_.aggregates.resize(counter.aggregates().size());
}

bool GroupCombination::Add(const GroupStates& states, std::string_view group, int64_t k_value) {
  // Marks `value` present in `into` (its rows do not matter once combined: 1).
  auto unite = [](AggregateState& into, const std::string& value) {
    if (into.values.emplace(value, 1).second) ++into.present;
  };
  const std::optional<int64_t> rows = CheckedAdd(k_value_, k_value);
  if (!rows) return false;
  k_value_ = *rows;
  const GroupState* state = states.Find(group);
  if (state == nullptr) return true;
  const std::vector<defs::AggregateColumn>& columns = counter_.aggregates();
  for (size_t i = 0; i < columns.size(); ++i) {
    const AggregateState& slot = state->aggregates[i];
    AggregateState& into = combined_.aggregates[i];
    const std::optional<int64_t> sum = CheckedAdd(into.sum, slot.sum);
    const std::optional<int64_t> count = CheckedAdd(into.count, slot.count);
    if (!sum || !count) return false;
    into.sum = *sum;
    into.count = *count;
    switch (columns[i].kind) {
      case defs::Aggregate::kCountDistinct:
        for (const auto& [value, value_rows] : slot.values) {
          if (value_rows > 0) unite(into, value);
        }
        break;
      case defs::Aggregate::kMin:
      case defs::Aggregate::kMax:
        if (const std::string* extreme = Extreme(slot, columns[i].kind == defs::Aggregate::kMax)) {
          unite(into, *extreme);
        }
        break;
      default:
        break;
    }
  }
  return true;
}

defs::GroupValue GroupCombination::Show() const {
  const bool distinct = counter_.layout() == defs::Layout::kDistinct;
  return ShowGroup(counter_, &combined_,
                   distinct ? combined_.aggregates.front().present : k_value_);
}

}  // namespace tally::derived
