#include "engine/derived/apply.h"

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/integer.h"
#include "engine/definitions/formula.h"
#include "engine/derived/aggregate_apply.h"
#include "engine/derived/derived_keyspace.h"

namespace tally::derived {

namespace defs = tally::definitions;

namespace {

// The increments of one batch, reused across batches on a thread.
struct Scratch {
  defs::EvalScratch eval;
  std::vector<defs::Increment> increments;
  std::vector<Family*> families;   // the family of each increment
  std::vector<size_t> change_end;  // increments of change i end here
  // The same for counters that are not plain: their record deltas (aggregate_apply.h).
  std::vector<defs::RecordDelta> deltas;
  std::vector<Family*> delta_families;
  std::vector<size_t> delta_change;  // the change of each delta
  StateWrites states;
  std::vector<std::string> markers;  // id marker keys
  std::vector<engine::HashedKey> hashed;
  struct Sum {
    int64_t delta;
    Family* family;
  };
  absl::flat_hash_map<absl::string_view, Sum> sums;
  absl::flat_hash_set<absl::string_view> seen_ids;
  std::vector<bool> skip;                     // changes not to apply (duplicates)
  std::vector<DecodedChange> stream_changes;  // a positioned batch's changes, as decoded ones
};

// Runs the formula of every counter on each change's source (or `only_counter`) into
// `scratch`; nothing is written. Counters whose start is at or above `limit` are left out
// (kPendingStart: only pending ones). The error names the change.
Status RunFormula(const CatalogSnapshot& catalog, std::span<const DecodedChange> changes,
                  std::string_view only_counter, int64_t limit, Scratch& scratch) {
  scratch.increments.clear();
  scratch.families.clear();
  scratch.change_end.clear();
  scratch.deltas.clear();
  scratch.delta_families.clear();
  scratch.delta_change.clear();
  for (size_t i = 0; i < changes.size(); ++i) {
    const DecodedChange& change = changes[i];
    const SourceEntry* source = catalog.sources.at(change.source->schema->name).get();
    std::optional<defs::RowView> old_row;
    std::optional<defs::RowView> new_row;
    if (change.old_row) old_row = defs::RowView(*change.old_row);
    if (change.new_row) new_row = defs::RowView(*change.new_row);
    for (const auto& family : source->counters) {
      if (!only_counter.empty() && family->counter.name() != only_counter) continue;
      if (family->start >= limit) continue;  // pending, or the change is in its backfill
      const bool plain = family->counter.layout() == defs::Layout::kPlain;
      auto status = plain ? defs::AppendIncrements(family->counter, old_row, new_row, scratch.eval,
                                                   &scratch.increments)
                          : defs::AppendRecordDeltas(family->counter, old_row, new_row,
                                                     scratch.eval, &scratch.deltas);
      if (!status) {
        // The row itself is bad (an overflow in an expression is the row's, not a counter's).
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("change {}: {}", i + 1, status.error().message));
      }
      scratch.families.resize(scratch.increments.size(), family.get());
      scratch.delta_families.resize(scratch.deltas.size(), family.get());
      scratch.delta_change.resize(scratch.deltas.size(), i);
    }
    scratch.change_end.push_back(scratch.increments.size());
  }
  scratch.states.Take(scratch.deltas, scratch.delta_families);
  return OkStatus();
}

// Sums the increments of the changes not marked to skip per key, checks that every result
// fits, then writes them all (a group back at 0 is deleted). Nothing is written on error.
// REQUIRES: `view` holds every key of the increments.
Status WriteSums(engine::View& view, Scratch& scratch, PushOutcome* outcome) {
  // One sum per key.
  scratch.sums.clear();
  size_t begin = 0;
  for (size_t i = 0; i < scratch.change_end.size(); ++i) {
    const size_t end = scratch.change_end[i];
    if (scratch.skip[i]) {
      ++outcome->duplicates;
      begin = end;
      continue;
    }
    for (size_t j = begin; j < end; ++j) {
      const defs::Increment& increment = scratch.increments[j];
      // A late change to a bucket past retention would bring it back partial: skipped. The
      // clock is read under the keys' locks, so a sweep cannot slip in between.
      const Family& family = *scratch.families[j];
      if (family.counter.KeyExpired(increment.key, view.now_ms() * 1000)) {
        ++outcome->expired;
        continue;
      }
      auto [it, inserted] =
          scratch.sums.try_emplace(Absl(increment.key), Scratch::Sum{0, scratch.families[j]});
      const std::optional<int64_t> sum = CheckedAdd(it->second.delta, increment.delta);
      if (!sum) {
        return MakeError(ErrorCode::kOverflow,
                         fmt::format("change {}: counter {}: the push would take {} out of the "
                                     "int64 range",
                                     i + 1, scratch.families[j]->counter.name(), increment.key));
      }
      it->second.delta = *sum;
    }
    begin = end;
    ++outcome->applied;
  }
  // The record deltas of counters that are not plain, summed and checked the same way.
  if (!scratch.deltas.empty()) {
    const int64_t now_micros = view.now_ms() * 1000;
    auto status = scratch.states.Plan(view, [&](size_t j) {
      if (scratch.skip[scratch.delta_change[j]]) return false;
      if (!scratch.delta_families[j]->counter.KeyExpired(scratch.deltas[j].group, now_micros)) {
        return true;
      }
      ++outcome->expired;
      return false;
    });
    if (!status) return status;
  }

  // Check every result before writing any.
  for (const auto& [stored_key, sum] : scratch.sums) {
    if (sum.delta == 0) continue;
    const std::string_view key(stored_key.data(), stored_key.size());
    const int64_t current = view.Get(engine::HashedKey(key)).value_or(0);
    if (!CheckedAdd(current, sum.delta)) {
      return MakeError(ErrorCode::kOverflow,
                       fmt::format("counter {}: the push would take {} out of the int64 range "
                                   "(now {}, increment {})",
                                   sum.family->counter.name(), key, current, sum.delta));
    }
  }

  // Apply: one write per key, groups back at 0 deleted, the index kept in step.
  for (const auto& [stored_key, sum] : scratch.sums) {
    if (sum.delta == 0) continue;
    const std::string_view key(stored_key.data(), stored_key.size());
    const engine::HashedKey hashed(key);
    const std::optional<int64_t> current = view.Get(hashed);
    const int64_t value = current.value_or(0) + sum.delta;
    Family& family = *sum.family;
    if (value == 0) {
      view.Delete(hashed);
      std::lock_guard lock(family.mutex);
      family.RemoveKey(key);
    } else {
      view.IncrBy(hashed, sum.delta);
      if (!current) {
        std::lock_guard lock(family.mutex);
        family.AddKey(key);
      }
    }
    family.version.fetch_add(1, std::memory_order_relaxed);
    ++outcome->increments;
  }
  if (!scratch.deltas.empty()) scratch.states.Write(view, outcome);
  return OkStatus();
}

// The keys of every increment and record delta in `scratch`, hashed, into scratch.hashed
// (replacing it).
void HashIncrementKeys(Scratch& scratch) {
  scratch.hashed.clear();
  for (const defs::Increment& increment : scratch.increments) {
    scratch.hashed.emplace_back(increment.key);
  }
  scratch.states.AddKeys(&scratch.hashed);
}

}  // namespace

// ---- Changes made idempotent by ids ----------------------------------------------------

Result<PushOutcome> Applier::ApplyChanges(const CatalogSnapshot& catalog,
                                          std::span<const DecodedChange> changes,
                                          std::string_view batch_id,
                                          std::string_view only_counter) {
  thread_local Scratch scratch;
  if (auto status = RunFormula(catalog, changes, only_counter, kPendingStart, scratch); !status) {
    return tl::unexpected(status.error());
  }

  // Lock every key the batch may write, and its id markers.
  scratch.markers.clear();
  if (!batch_id.empty()) scratch.markers.push_back(MarkerKey(batch_id));
  for (const DecodedChange& change : changes) {
    if (!change.id.empty()) scratch.markers.push_back(MarkerKey(change.id));
  }
  HashIncrementKeys(scratch);
  const size_t first_marker = scratch.hashed.size();
  for (const std::string& marker : scratch.markers) scratch.hashed.emplace_back(marker);
  const std::span<const engine::HashedKey> marker_keys =
      std::span<const engine::HashedKey>(scratch.hashed).subspan(first_marker);

  PushOutcome outcome;
  outcome.changes = changes.size();
  engine::View view = keyspace_.Lock(scratch.hashed);
  size_t next_marker = 0;
  if (!batch_id.empty()) {
    if (view.Exists(marker_keys[next_marker++])) {
      outcome.duplicates = changes.size();
      outcome.required_epoch = view.required_epoch();
      return outcome;
    }
  }
  // Which changes were applied before (or repeat an id within this batch).
  scratch.skip.assign(changes.size(), false);
  scratch.seen_ids.clear();
  for (size_t i = 0; i < changes.size(); ++i) {
    if (changes[i].id.empty()) continue;
    const engine::HashedKey& marker = marker_keys[next_marker++];
    scratch.skip[i] = !scratch.seen_ids.insert(Absl(changes[i].id)).second || view.Exists(marker);
  }
  if (auto status = WriteSums(view, scratch, &outcome); !status) {
    return tl::unexpected(status.error());
  }

  // The markers, durable with the increments.
  if (outcome.applied > 0 || !batch_id.empty()) {
    engine::SetOptions marker_options;
    marker_options.expiry = engine::ExpiryAction::kSetDeadline;
    marker_options.deadline_ms = view.now_ms() + idempotency_window_ms_;
    next_marker = 0;
    if (!batch_id.empty()) view.Set(marker_keys[next_marker++], 1, marker_options);
    for (size_t i = 0; i < changes.size(); ++i) {
      if (changes[i].id.empty()) continue;
      const engine::HashedKey& marker = marker_keys[next_marker++];
      if (!scratch.skip[i]) view.Set(marker, 1, marker_options);
    }
  }
  outcome.required_epoch = view.required_epoch();
  return outcome;
}

// ---- Parts of one stream position ------------------------------------------------------

Result<PushOutcome> Applier::ApplyPositioned(const CatalogSnapshot& catalog,
                                             std::span<const PositionedPart> parts,
                                             int64_t position, std::string_view only_counter) {
  thread_local Scratch scratch;
  // Counters whose start is at or above this skip the batch (a backfill chunk skips only
  // pending counters).
  const int64_t limit = position == 0 ? kPendingStart : position;
  std::vector<std::string> position_keys;
  bool truncates = false;
  for (const PositionedPart& part : parts) {
    position_keys.push_back(PositionKey(part.position_name));
    truncates = truncates || std::ranges::any_of(part.changes, &SourceRowChange::truncate);
  }
  // Every change as a push would carry it, part after part.
  auto as_decoded = [&](size_t part, size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) {
      const SourceRowChange& change = parts[part].changes[j];
      if (change.truncate) continue;
      DecodedChange& decoded = scratch.stream_changes.emplace_back();
      decoded.source = &parts[part].source->view;
      decoded.old_row = change.old_row;
      decoded.new_row = change.new_row;
    }
  };
  scratch.stream_changes.clear();
  for (size_t i = 0; i < parts.size(); ++i) as_decoded(i, 0, parts[i].changes.size());
  if (auto status = RunFormula(catalog, scratch.stream_changes, only_counter, limit, scratch);
      !status) {
    return tl::unexpected(status.error());
  }
  // A TRUNCATE deletes groups it cannot name in advance: such a batch holds every stripe.
  // Otherwise only the stripes of its keys and position records.
  HashIncrementKeys(scratch);
  for (const std::string& key : position_keys) scratch.hashed.emplace_back(key);
  engine::View view = truncates ? keyspace_.LockAll() : keyspace_.Lock(scratch.hashed);

  PushOutcome outcome;
  std::vector<bool> due(parts.size(), true);
  for (size_t i = 0; i < parts.size(); ++i) {
    outcome.changes += parts[i].changes.size();
    const engine::HashedKey hashed(position_keys[i]);
    due[i] = position == 0 || view.Get(hashed).value_or(0) < position;  // else counted before
  }
  if (!truncates) {
    // The common case: the formula already ran over every change; skip the parts counted
    // before.
    scratch.skip.clear();
    for (size_t i = 0; i < parts.size(); ++i) {
      scratch.skip.resize(scratch.skip.size() + parts[i].changes.size(), !due[i]);
    }
    if (auto status = WriteSums(view, scratch, &outcome); !status) {
      return tl::unexpected(status.error());
    }
  }
  // With a TRUNCATE: in order, part by part; within a part, the changes before the TRUNCATE
  // count, then every group of the source goes, then the changes after it count.
  for (size_t i = 0; i < parts.size() && truncates; ++i) {
    if (!due[i]) {
      outcome.duplicates += parts[i].changes.size();
      continue;
    }
    const std::span<const SourceRowChange> changes = parts[i].changes;
    size_t begin = 0;
    for (size_t end = 0; end <= changes.size(); ++end) {
      if (end < changes.size() && !changes[end].truncate) continue;
      scratch.stream_changes.clear();
      as_decoded(i, begin, end);
      if (auto status = RunFormula(catalog, scratch.stream_changes, only_counter, limit, scratch);
          !status) {
        return tl::unexpected(status.error());
      }
      scratch.skip.assign(scratch.stream_changes.size(), false);
      if (auto status = WriteSums(view, scratch, &outcome); !status) {
        return tl::unexpected(status.error());
      }
      if (end < changes.size()) {
        for (const auto& family : parts[i].source->counters) {
          if (family->start >= limit) continue;  // its backfill's snapshot is after this
          if (!only_counter.empty() && family->counter.name() != only_counter) continue;
          std::lock_guard lock(family->mutex);
          std::vector<std::string> records;
          for (const std::string& key : family->keys) {
            view.Delete(engine::HashedKey(key));
            family->AppendRecordKeys(key, &records);
          }
          for (const std::string& key : records) view.Delete(engine::HashedKey(key));
          family->ClearKeys();
          family->version.fetch_add(1, std::memory_order_relaxed);
        }
        ++outcome.applied;
      }
      begin = end + 1;
    }
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (due[i] && position != 0) view.Set(engine::HashedKey(position_keys[i]), position, {});
  }
  outcome.required_epoch = view.required_epoch();
  return outcome;
}

// ---- A cluster node's shares of its change stream -------------------------------------

namespace {

// The records of one share of a cluster's change-stream message: its position record and,
// with a fence, the fence's three.
struct ShareRecords {
  std::string position;
  std::string claim, lsn, part;  // empty without a fence

  ShareRecords(const PartitionShare& share, bool fenced)
      : position(PositionKey(share.position_name)) {
    if (!fenced) return;
    const std::string name(share.fence_name);
    claim = PositionKey(name + ":claim");
    lsn = PositionKey(name + ":lsn");
    part = PositionKey(name + ":part");
  }
  void AppendKeys(std::vector<engine::HashedKey>* out) const {
    out->emplace_back(position);
    if (claim.empty()) return;
    out->emplace_back(claim);
    out->emplace_back(lsn);
    out->emplace_back(part);
  }
};

// What a share does with a message: nothing (done before), move its position alone (a
// replaced consumer's message), move its position and claim (a transaction counted before,
// sent again by a newer consumer), or apply it.
enum class ShareStep : uint8_t { kDone, kPositionOnly, kDuplicate, kApply };

ShareStep DecideShare(engine::View& view, const ShareRecords& records, const ShareOrder& order) {
  auto get = [&](const std::string& key) { return view.Get(engine::HashedKey(key)).value_or(0); };
  // A message ordered by LSN may come in segments (one per transaction of a consumer's
  // batch), all at its position: the fence tells them apart. Any other is done once its
  // position is reached.
  const bool segmented = order.fence && order.fence->lsn != 0;
  const int64_t position = get(records.position);
  if (segmented ? position > order.position : position >= order.position) {
    return ShareStep::kDone;
  }
  if (!order.fence) return ShareStep::kApply;
  const SourceFence& fence = *order.fence;
  if (fence.claim < get(records.claim)) return ShareStep::kPositionOnly;
  if (fence.lsn == 0) return ShareStep::kApply;
  const std::pair<int64_t, int64_t> last{get(records.lsn), get(records.part)};
  return std::pair{fence.lsn, fence.part} > last ? ShareStep::kApply : ShareStep::kDuplicate;
}

// Sets the records of a share that is not done. The claim moves with a newer consumer's
// message even when it counts nothing: its predecessor's later messages are refused then.
void SetShareRecords(engine::View& view, const ShareRecords& records, const ShareOrder& order,
                     ShareStep step) {
  view.Set(engine::HashedKey(records.position), order.position, {});
  if (step == ShareStep::kPositionOnly || !order.fence) return;
  view.Set(engine::HashedKey(records.claim), order.fence->claim, {});
  if (step != ShareStep::kApply || order.fence->lsn == 0) return;
  view.Set(engine::HashedKey(records.lsn), order.fence->lsn, {});
  view.Set(engine::HashedKey(records.part), order.fence->part, {});
}

}  // namespace

Result<PushOutcome> Applier::ApplyShares(
    const CatalogSnapshot& catalog, std::span<const DecodedChange> changes, const ShareOrder& order,
    std::string_view only_counter, std::span<const PartitionShare> shares,
    const std::function<uint32_t(std::string_view key)>& partition_of,
    std::vector<uint32_t>* overflowed) {
  thread_local Scratch scratch;
  if (auto status = RunFormula(catalog, changes, only_counter, order.limit, scratch); !status) {
    return tl::unexpected(status.error());
  }
  if (!scratch.deltas.empty()) {
    return InvalidArgument("a counter that keeps records (not a plain count or sum) moved");
  }
  // Each increment's share (index into `shares`), or none.
  constexpr size_t kNone = SIZE_MAX;
  std::vector<size_t> share_of(scratch.increments.size(), kNone);
  for (size_t j = 0; j < scratch.increments.size(); ++j) {
    const uint32_t partition = partition_of(scratch.increments[j].key);
    for (size_t s = 0; s < shares.size(); ++s) {
      if (shares[s].partition == partition) share_of[j] = s;
    }
  }
  scratch.hashed.clear();
  for (size_t j = 0; j < scratch.increments.size(); ++j) {
    if (share_of[j] != kNone) scratch.hashed.emplace_back(scratch.increments[j].key);
  }
  std::vector<ShareRecords> records;
  records.reserve(shares.size());  // the hashed keys view its strings: no reallocation
  for (const PartitionShare& share : shares) {
    records.emplace_back(share, order.fence.has_value());
    records.back().AppendKeys(&scratch.hashed);
  }
  engine::View view = keyspace_.Lock(scratch.hashed);
  std::vector<ShareStep> steps;
  for (const ShareRecords& r : records) steps.push_back(DecideShare(view, r, order));

  PushOutcome outcome;
  outcome.changes = changes.size();
  // One share at a time, so that an overflow in one leaves the others whole: each pass
  // writes the increments of its share alone.
  const std::vector<defs::Increment> increments = scratch.increments;
  const std::vector<Family*> families = scratch.families;
  const std::vector<size_t> change_end = scratch.change_end;
  for (size_t s = 0; s < shares.size(); ++s) {
    if (steps[s] == ShareStep::kDone) continue;
    if (steps[s] == ShareStep::kApply) {
      scratch.increments.clear();
      scratch.families.clear();
      scratch.change_end.clear();
      size_t begin = 0;
      for (const size_t end : change_end) {
        for (size_t j = begin; j < end; ++j) {
          if (share_of[j] != s) continue;
          scratch.increments.push_back(increments[j]);
          scratch.families.push_back(families[j]);
        }
        scratch.change_end.push_back(scratch.increments.size());
        begin = end;
      }
      scratch.skip.assign(scratch.change_end.size(), false);
      PushOutcome share_outcome;
      if (auto status = WriteSums(view, scratch, &share_outcome); !status) {
        if (status.error().code != ErrorCode::kOverflow) return tl::unexpected(status.error());
        if (overflowed != nullptr) overflowed->push_back(shares[s].partition);
      }
      outcome.increments += share_outcome.increments;
      outcome.expired += share_outcome.expired;
    }
    SetShareRecords(view, records[s], order, steps[s]);
  }
  outcome.applied = changes.size();
  outcome.required_epoch = view.required_epoch();
  return outcome;
}

void Applier::DeleteShares(std::span<Family* const> families, const ShareOrder& order,
                           std::span<const PartitionShare> shares,
                           const std::function<uint32_t(std::string_view key)>& partition_of) {
  std::vector<ShareRecords> records;
  records.reserve(shares.size());  // record_keys view its strings: no reallocation
  std::vector<engine::HashedKey> record_keys;
  for (const PartitionShare& share : shares) {
    records.emplace_back(share, order.fence.has_value());
    records.back().AppendKeys(&record_keys);
  }
  std::vector<ShareStep> steps;
  {
    engine::View view = keyspace_.Lock(record_keys);
    for (const ShareRecords& r : records) steps.push_back(DecideShare(view, r, order));
  }
  auto applied = [&](uint32_t partition) {
    for (size_t s = 0; s < shares.size(); ++s) {
      if (shares[s].partition == partition) return steps[s] == ShareStep::kApply;
    }
    return false;
  };
  constexpr size_t kChunk = 4096;
  for (Family* family : families) {
    if (family->start >= order.limit) continue;
    std::vector<std::string> doomed;
    {
      std::lock_guard lock(family->mutex);
      for (const std::string& key : family->keys) {
        if (applied(partition_of(key))) doomed.push_back(key);
      }
    }
    for (size_t begin = 0; begin < doomed.size(); begin += kChunk) {
      const size_t end = std::min(doomed.size(), begin + kChunk);
      std::vector<engine::HashedKey> hashed(doomed.begin() + static_cast<ptrdiff_t>(begin),
                                            doomed.begin() + static_cast<ptrdiff_t>(end));
      engine::View view = keyspace_.Lock(hashed);
      std::lock_guard lock(family->mutex);
      for (size_t i = begin; i < end; ++i) {
        view.Delete(hashed[i - begin]);
        family->RemoveKey(doomed[i]);
      }
      family->version.fetch_add(1, std::memory_order_relaxed);
    }
  }
  engine::View view = keyspace_.Lock(record_keys);
  for (size_t s = 0; s < shares.size(); ++s) {
    if (steps[s] != ShareStep::kDone) SetShareRecords(view, records[s], order, steps[s]);
  }
}

Status Applier::CheckGroupValues(const Family& family, std::span<const KeyValue> values) {
  if (family.states != nullptr) {
    return InvalidArgument(fmt::format("counter {} keeps records: a cluster repairs plain counters",
                                       family.counter.name()));
  }
  for (const KeyValue& item : values) {
    if (auto status = family.CheckGroupKey(item.key); !status) return status;
  }
  return OkStatus();
}

Result<uint64_t> Applier::SetShares(
    Family* family, std::span<const KeyValue> values, const ShareOrder& order,
    std::span<const PartitionShare> shares,
    const std::function<uint32_t(std::string_view key)>& partition_of) {
  if (family == nullptr && !values.empty()) {
    return InvalidArgument("groups to set without their counter");
  }
  if (family != nullptr) {
    if (auto status = CheckGroupValues(*family, values); !status) {
      return tl::unexpected(status.error());
    }
  }
  std::vector<ShareRecords> records;
  records.reserve(shares.size());  // the hashed keys view its strings: no reallocation
  std::vector<engine::HashedKey> hashed;
  // Each value's share (index into `shares`), or none.
  constexpr size_t kNone = SIZE_MAX;
  std::vector<size_t> share_of(values.size(), kNone);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t partition = partition_of(values[i].key);
    for (size_t s = 0; s < shares.size(); ++s) {
      if (shares[s].partition == partition) share_of[i] = s;
    }
    if (share_of[i] != kNone) hashed.emplace_back(values[i].key);
  }
  const size_t value_keys = hashed.size();
  for (const PartitionShare& share : shares) {
    records.emplace_back(share, order.fence.has_value());
    records.back().AppendKeys(&hashed);
  }
  engine::View view = keyspace_.Lock(hashed);
  std::vector<ShareStep> steps;
  for (const ShareRecords& r : records) steps.push_back(DecideShare(view, r, order));
  size_t next = 0;  // the next of the hashed value keys, in the order of `values`
  for (size_t i = 0; i < values.size() && next < value_keys; ++i) {
    if (share_of[i] == kNone) continue;
    const engine::HashedKey& key = hashed[next++];
    if (steps[share_of[i]] != ShareStep::kApply) continue;
    std::lock_guard lock(family->mutex);
    if (values[i].value == 0) {
      view.Delete(key);
      family->RemoveKey(values[i].key);
    } else {
      view.Set(key, values[i].value, engine::SetOptions{});
      family->AddKey(values[i].key);
    }
  }
  if (family != nullptr) family->version.fetch_add(1, std::memory_order_relaxed);
  for (size_t s = 0; s < shares.size(); ++s) {
    if (steps[s] != ShareStep::kDone) SetShareRecords(view, records[s], order, steps[s]);
  }
  return view.required_epoch();
}

Result<std::vector<std::string>> Applier::PlanKeys(const CatalogSnapshot& catalog,
                                                   std::span<const DecodedChange> changes,
                                                   std::string_view only_counter) {
  thread_local Scratch scratch;
  if (auto status = RunFormula(catalog, changes, only_counter, kPendingStart, scratch); !status) {
    return tl::unexpected(status.error());
  }
  if (!scratch.deltas.empty()) {
    return InvalidArgument("a counter that keeps records (not a plain count or sum) moved");
  }
  absl::flat_hash_set<absl::string_view> seen;
  std::vector<std::string> keys;
  for (const defs::Increment& increment : scratch.increments) {
    if (increment.delta != 0 && seen.insert(Absl(increment.key)).second) {
      keys.push_back(increment.key);
    }
  }
  return keys;
}

}  // namespace tally::derived
