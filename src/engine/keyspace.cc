#include "engine/keyspace.h"

#include <algorithm>
#include <cassert>

#include "core/integer.h"

namespace tally::engine {

using EntryId = CounterMap::EntryId;
constexpr EntryId kNoEntry = CounterMap::kNoEntry;

namespace detail {

// One stripe: its map, its expiry bookkeeping and its changes since the last drain.
// Every member is guarded by `mutex`, except the two counters mirrored for lock-free stats.
struct alignas(64) StripeState {
  std::mutex mutex;
  CounterMap map;
  absl::flat_hash_map<EntryId, int64_t> deadlines;
  // (deadline, entry) in deadline order; entries whose deadline changed since are stale and
  // are skipped when popped.
  std::priority_queue<std::pair<int64_t, EntryId>, std::vector<std::pair<int64_t, EntryId>>,
                      std::greater<>>
      expiry_queue;
  std::vector<EntryId> dirty;                   // entries to write at the next drain (may repeat)
  std::vector<std::string> deleted;             // keys to delete at the next drain
  std::vector<EntryId> checkpoint_dirty;        // drained since the last checkpoint
  std::vector<std::string> checkpoint_deleted;  // deleted (and drained) since then
  uint64_t last_write_epoch = 0;                // epoch of the latest write to this stripe
  // Beside last_write_epoch, which every write touches anyway: the same cache line.
  uint64_t unsampled_writes = 0;        // since the last one offered to `writes`
  std::atomic<uint64_t> increments{0};  // applied; written under `mutex`, read anywhere
  std::atomic<size_t> size{0};
  std::atomic<size_t> expiring{0};
  std::atomic<size_t> memory{0};
  // Per database (engine/databases.h), counters and counters with a deadline, kept only for
  // databases 1 and up; entry 0 sums them all (database 0's are the stripe's rest). Written
  // under `mutex`, read anywhere.
  std::array<std::atomic<uint32_t>, kMaxDatabases> database_size{};
  std::array<std::atomic<uint32_t>, kMaxDatabases> database_expiring{};
  WriteSketch writes;  // the most-written keys (see HotKeys)

  void CountIncrements(uint64_t n) {
    increments.store(increments.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  // Refreshes the mirrors that stats read without the lock.
  void UpdateMirrors() {
    size.store(map.size(), std::memory_order_relaxed);
    expiring.store(deadlines.size(), std::memory_order_relaxed);
    memory.store(map.MemoryBytes() + deadlines.capacity() * (sizeof(EntryId) + 8 + 1) +
                     expiry_queue.size() * 16,
                 std::memory_order_relaxed);
  }

  // Adds `delta` to the per-database count of `key`'s database, when that is not 0.
  static void CountInDatabase(std::array<std::atomic<uint32_t>, kMaxDatabases>& counts,
                              std::string_view key, int delta) {
    const uint32_t db = DatabaseOf(key);
    if (db == 0) return;
    for (const uint32_t i : {db, 0u}) {
      counts[i].store(counts[i].load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
    }
  }

  void ClearDatabaseCounts() {
    for (auto& count : database_size) count.store(0, std::memory_order_relaxed);
    for (auto& count : database_expiring) count.store(0, std::memory_order_relaxed);
  }

  void MarkDirty(EntryId id) {
    if (!map.HasFlag(id, CounterMap::kDirty)) {
      map.SetFlag(id, CounterMap::kDirty);
      dirty.push_back(id);
    }
  }

  int64_t DeadlineOf(EntryId id) const {
    if (!map.HasFlag(id, CounterMap::kHasExpiry)) return 0;
    return deadlines.find(id)->second;
  }

  void SetDeadline(EntryId id, int64_t deadline_ms) {
    if (!map.HasFlag(id, CounterMap::kHasExpiry)) {
      CountInDatabase(database_expiring, map.key(id), 1);
    }
    map.SetFlag(id, CounterMap::kHasExpiry);
    deadlines[id] = deadline_ms;
    expiry_queue.emplace(deadline_ms, id);
    UpdateMirrors();
  }

  void ClearDeadline(EntryId id) {
    if (!map.HasFlag(id, CounterMap::kHasExpiry)) return;
    CountInDatabase(database_expiring, map.key(id), -1);
    map.ClearFlag(id, CounterMap::kHasExpiry);
    deadlines.erase(id);
    UpdateMirrors();
  }

  // Erases the entry without recording a deletion (what loading does).
  void Erase(EntryId id) {
    ClearDeadline(id);
    CountInDatabase(database_size, map.key(id), -1);
    map.Erase(id);
    UpdateMirrors();
  }

  void Remove(EntryId id) {
    deleted.emplace_back(map.key(id));
    Erase(id);
  }

  // REQUIRES: `key` is absent (the callers looked it up just before).
  EntryId Insert(const HashedKey& key) {
    const EntryId id = map.Insert(key);
    CountInDatabase(database_size, key.key, 1);
    UpdateMirrors();
    return id;
  }

  // Calls `f(id)` for every live entry whose key's slot lies in one of `ranges`; `f` may
  // erase it.
  template <typename F>
  void ForEachInSlots(std::span<const SlotRange> ranges, F f) {
    for (EntryId id = 0; id < map.entry_limit(); ++id) {
      if (map.IsLive(id) && AnyContains(ranges, KeySlot(map.key(id)))) f(id);
    }
  }

  // Drops stale queue entries once they outnumber the live deadlines, so that a key whose
  // expiry is reset over and over cannot grow the queue without bound.
  void CompactExpiryQueue() {
    if (expiry_queue.size() <= 2 * deadlines.size() + 1024) return;
    decltype(expiry_queue) fresh;
    for (const auto& [id, deadline] : deadlines) fresh.emplace(deadline, id);
    expiry_queue.swap(fresh);
  }
};

}  // namespace detail

using detail::StripeState;

// ---- View -------------------------------------------------------------------------------

View::View(View&& other) noexcept
    : keyspace_(other.keyspace_),
      now_ms_(other.now_ms_),
      locked_(other.locked_),
      required_epoch_(other.required_epoch_),
      wrote_(other.wrote_) {
  other.locked_.reset();
  other.wrote_ = false;
}

int64_t View::keyspace_clock_now() const { return keyspace_->clock()->NowMillis(); }

View::~View() {
  if (keyspace_ != nullptr) keyspace_->ReleaseView(*this);
}

StripeState& View::ForRead(const HashedKey& key) {
  const size_t index = StripeOf(key.hash);
  assert(locked_.test(index));
  StripeState& stripe = keyspace_->stripe(index);
  required_epoch_ = std::max(required_epoch_, stripe.last_write_epoch);
  return stripe;
}

StripeState& View::ForWrite(const HashedKey& key, uint64_t writes) {
  const size_t index = StripeOf(key.hash);
  assert(locked_.test(index));
  StripeState& stripe = keyspace_->stripe(index);
  stripe.unsampled_writes += writes;
  if (stripe.unsampled_writes >= kWriteSampleEvery) {
    stripe.writes.Add(key, stripe.unsampled_writes);
    stripe.unsampled_writes = 0;
  }
  const uint64_t epoch = keyspace_->open_epoch();
  stripe.last_write_epoch = epoch;
  required_epoch_ = std::max(required_epoch_, epoch);
  wrote_ = true;
  return stripe;
}

EntryId View::LiveEntry(StripeState& stripe, const HashedKey& key, bool remove_expired) {
  const EntryId id = stripe.map.Find(key);
  if (id == kNoEntry) return kNoEntry;
  if (stripe.map.HasFlag(id, CounterMap::kHasExpiry) && stripe.DeadlineOf(id) <= now_ms()) {
    if (remove_expired) stripe.Remove(id);
    return kNoEntry;
  }
  return id;
}

void View::Prefetch(std::span<const HashedKey> keys) {
  const auto map_of = [this](const HashedKey& key) -> const CounterMap& {
    assert(locked_.test(StripeOf(key.hash)));
    return keyspace_->stripe(StripeOf(key.hash)).map;
  };
  for (const HashedKey& key : keys) map_of(key).PrefetchSlot(key.hash);
  for (const HashedKey& key : keys) map_of(key).PrefetchEntry(key.hash);
  for (const HashedKey& key : keys) map_of(key).PrefetchHeapKey(key.hash);
}

std::optional<int64_t> View::Get(const HashedKey& key) {
  StripeState& stripe = ForRead(key);
  const EntryId id = LiveEntry(stripe, key, false);
  if (id == kNoEntry) return std::nullopt;
  return stripe.map.value(id);
}

Result<int64_t> View::IncrBy(const HashedKey& key, int64_t delta) {
  IncrementOutcome outcome;
  IncrBySequence(key, std::span<const int64_t>(&delta, 1),
                 std::span<IncrementOutcome>(&outcome, 1));
  if (outcome.overflow) {
    return MakeError(ErrorCode::kOverflow, "increment or decrement would overflow");
  }
  return outcome.value;
}

void View::IncrBySequence(const HashedKey& key, std::span<const int64_t> deltas,
                          std::span<IncrementOutcome> outcomes) {
  StripeState& stripe = ForWrite(key, deltas.size());
  EntryId id = LiveEntry(stripe, key, true);
  if (id == kNoEntry) id = stripe.Insert(key);
  int64_t value = stripe.map.value(id);
  uint64_t applied = 0;
  for (size_t i = 0; i < deltas.size(); ++i) {
    const std::optional<int64_t> sum = CheckedAdd(value, deltas[i]);
    outcomes[i].overflow = !sum.has_value();
    if (sum) value = *sum;
    applied += sum.has_value() ? 1 : 0;
    outcomes[i].value = value;
  }
  stripe.CountIncrements(applied);
  stripe.map.value(id) = value;
  stripe.MarkDirty(id);
}

Result<int64_t> View::IncrByWithExpiry(const HashedKey& key, int64_t delta, int64_t deadline_ms,
                                       bool only_if_no_expiry) {
  StripeState& stripe = ForWrite(key);
  EntryId id = LiveEntry(stripe, key, true);
  if (id == kNoEntry) id = stripe.Insert(key);
  const std::optional<int64_t> sum = CheckedAdd(stripe.map.value(id), delta);
  if (!sum) return MakeError(ErrorCode::kOverflow, "increment or decrement would overflow");
  stripe.CountIncrements(1);
  stripe.map.value(id) = *sum;
  if (!only_if_no_expiry || !stripe.map.HasFlag(id, CounterMap::kHasExpiry)) {
    stripe.SetDeadline(id, deadline_ms);
  }
  stripe.MarkDirty(id);
  return *sum;
}

SetOutcome View::Set(const HashedKey& key, int64_t value, const SetOptions& options) {
  StripeState& stripe = ForWrite(key);
  EntryId id = LiveEntry(stripe, key, true);
  SetOutcome outcome;
  if (id != kNoEntry) outcome.previous = stripe.map.value(id);
  if ((options.condition == SetCondition::kIfMissing && id != kNoEntry) ||
      (options.condition == SetCondition::kIfExists && id == kNoEntry)) {
    return outcome;
  }
  outcome.applied = true;
  if (id == kNoEntry) id = stripe.Insert(key);
  stripe.map.value(id) = value;
  switch (options.expiry) {
    case ExpiryAction::kClear:
      stripe.ClearDeadline(id);
      break;
    case ExpiryAction::kKeep:
      break;
    case ExpiryAction::kSetDeadline:
      if (options.deadline_ms <= now_ms()) {
        stripe.Remove(id);
        return outcome;
      }
      stripe.SetDeadline(id, options.deadline_ms);
      break;
  }
  stripe.MarkDirty(id);
  return outcome;
}

void View::Put(const HashedKey& key, const CounterRecord& record) {
  StripeState& stripe = ForWrite(key);
  EntryId id = LiveEntry(stripe, key, true);
  if (record.deadline_ms != 0 && record.deadline_ms <= now_ms()) {
    if (id != kNoEntry) stripe.Remove(id);
    return;
  }
  if (id == kNoEntry) id = stripe.Insert(key);
  stripe.map.value(id) = record.value;
  if (record.deadline_ms == 0) {
    stripe.ClearDeadline(id);
  } else {
    stripe.SetDeadline(id, record.deadline_ms);
  }
  stripe.MarkDirty(id);
}

bool View::Delete(const HashedKey& key) {
  StripeState& stripe = ForWrite(key);
  const EntryId id = LiveEntry(stripe, key, true);
  if (id == kNoEntry) return false;
  stripe.Remove(id);
  return true;
}

bool View::Exists(const HashedKey& key) {
  StripeState& stripe = ForRead(key);
  return LiveEntry(stripe, key, false) != kNoEntry;
}

int64_t View::DeadlineMillis(const HashedKey& key) {
  StripeState& stripe = ForRead(key);
  const EntryId id = LiveEntry(stripe, key, false);
  if (id == kNoEntry) return -2;
  if (!stripe.map.HasFlag(id, CounterMap::kHasExpiry)) return -1;
  return stripe.DeadlineOf(id);
}

int64_t View::TimeToLiveMillis(const HashedKey& key) {
  const int64_t deadline = DeadlineMillis(key);
  if (deadline < 0) return deadline;
  return std::max<int64_t>(0, deadline - now_ms());
}

bool View::Expire(const HashedKey& key, int64_t deadline_ms, ExpireCondition condition) {
  StripeState& stripe = ForWrite(key);
  const EntryId id = LiveEntry(stripe, key, true);
  if (id == kNoEntry) return false;
  const bool has_expiry = stripe.map.HasFlag(id, CounterMap::kHasExpiry);
  const int64_t current = stripe.DeadlineOf(id);
  // A key without expiry counts as expiring never: GT never holds, LT always does.
  switch (condition) {
    case ExpireCondition::kAlways:
      break;
    case ExpireCondition::kIfNoExpiry:
      if (has_expiry) return false;
      break;
    case ExpireCondition::kIfHasExpiry:
      if (!has_expiry) return false;
      break;
    case ExpireCondition::kIfGreater:
      if (!has_expiry || deadline_ms <= current) return false;
      break;
    case ExpireCondition::kIfLess:
      if (has_expiry && deadline_ms >= current) return false;
      break;
  }
  if (deadline_ms <= now_ms()) {
    stripe.Remove(id);
    return true;
  }
  stripe.SetDeadline(id, deadline_ms);
  stripe.MarkDirty(id);
  return true;
}

bool View::Persist(const HashedKey& key) {
  StripeState& stripe = ForWrite(key);
  const EntryId id = LiveEntry(stripe, key, true);
  if (id == kNoEntry || !stripe.map.HasFlag(id, CounterMap::kHasExpiry)) return false;
  stripe.ClearDeadline(id);
  stripe.MarkDirty(id);
  return true;
}

void View::FlushAll() {
  assert(locked_.all());
  const uint64_t epoch = keyspace_->open_epoch();
  for (size_t i = 0; i < kStripeCount; ++i) {
    StripeState& stripe = keyspace_->stripe(i);
    stripe.map.Clear();
    stripe.ClearDatabaseCounts();
    stripe.deadlines.clear();
    stripe.expiry_queue = {};
    stripe.dirty.clear();
    stripe.deleted.clear();
    stripe.last_write_epoch = epoch;
    stripe.UpdateMirrors();
  }
  keyspace_->clear_all_pending_ = true;
  required_epoch_ = std::max(required_epoch_, epoch);
  wrote_ = true;
}

void View::FlushDatabase(uint32_t db) {
  assert(locked_.all());
  if (keyspace_->database_size(db) == keyspace_->size()) {
    FlushAll();  // nothing of another database to keep: the whole store is cleared at once
    return;
  }
  const uint64_t epoch = keyspace_->open_epoch();
  for (size_t i = 0; i < kStripeCount; ++i) {
    StripeState& stripe = keyspace_->stripe(i);
    if (db != 0 && stripe.database_size[db].load(std::memory_order_relaxed) == 0) continue;
    for (EntryId id = 0; id < stripe.map.entry_limit(); ++id) {
      if (stripe.map.IsLive(id) && DatabaseOf(stripe.map.key(id)) == db) stripe.Remove(id);
    }
    stripe.last_write_epoch = epoch;
  }
  required_epoch_ = std::max(required_epoch_, epoch);
  wrote_ = true;
}

void View::ClearSlots(SlotRange slots) {
  assert(locked_.all());
  const uint64_t epoch = keyspace_->open_epoch();
  for (size_t i = 0; i < kStripeCount; ++i) {
    StripeState& stripe = keyspace_->stripe(i);
    stripe.ForEachInSlots(std::span(&slots, 1), [&](EntryId id) { stripe.Remove(id); });
    stripe.last_write_epoch = epoch;
  }
  required_epoch_ = std::max(required_epoch_, epoch);
  wrote_ = true;
}

// ---- Keyspace ---------------------------------------------------------------------------

Keyspace::Keyspace(const Clock* clock) : clock_(clock) {
  for (auto& stripe : stripes_) stripe = std::make_unique<StripeState>();
}

Keyspace::~Keyspace() = default;

View Keyspace::Lock(const HashedKey& key) { return LockStripe(StripeOf(key.hash)); }

View Keyspace::Lock(std::span<const HashedKey> keys) {
  View view(this);
  std::bitset<kStripeCount> wanted;
  for (const HashedKey& key : keys) wanted.set(StripeOf(key.hash));
  // Ascending order everywhere: no two lockers can wait on each other.
  for (size_t i = wanted._Find_first(); i < kStripeCount; i = wanted._Find_next(i)) {
    stripe(i).mutex.lock();
  }
  view.locked_ = wanted;
  return view;
}

View Keyspace::LockStripe(size_t index) {
  View view(this);
  stripe(index).mutex.lock();
  view.locked_.set(index);
  return view;
}

View Keyspace::LockAll() {
  View view(this);
  for (size_t i = 0; i < kStripeCount; ++i) stripe(i).mutex.lock();
  view.locked_.set();
  return view;
}

void Keyspace::ReleaseView(View& view) {
  if (view.locked_.none()) return;
  // Visit only the set bits: most views hold one stripe.
  for (size_t i = view.locked_._Find_first(); i < kStripeCount; i = view.locked_._Find_next(i)) {
    stripe(i).mutex.unlock();
  }
  view.locked_.reset();
  if (view.wrote_ && on_write_) on_write_();
}

void Keyspace::LoadPut(std::string_view key_bytes, const CounterRecord& record, LoadSource source) {
  const HashedKey key(key_bytes);
  StripeState& s = stripe(StripeOf(key.hash));
  std::lock_guard lock(s.mutex);
  EntryId id = s.map.Find(key);
  if (record.deadline_ms != 0 && record.deadline_ms <= clock_->NowMillis()) {
    if (id != kNoEntry) s.Erase(id);
    s.deleted.emplace_back(key_bytes);
    s.UpdateMirrors();
    return;
  }
  if (id == kNoEntry) id = s.Insert(key);
  s.map.value(id) = record.value;
  s.ClearDeadline(id);
  if (record.deadline_ms != 0) s.SetDeadline(id, record.deadline_ms);
  if (source == LoadSource::kLog && !s.map.HasFlag(id, CounterMap::kCheckpointDirty)) {
    s.map.SetFlag(id, CounterMap::kCheckpointDirty);
    s.checkpoint_dirty.push_back(id);
    checkpoint_backlog_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Keyspace::LoadDelete(std::string_view key_bytes, LoadSource source) {
  const HashedKey key(key_bytes);
  StripeState& s = stripe(StripeOf(key.hash));
  std::lock_guard lock(s.mutex);
  if (source == LoadSource::kLog) s.checkpoint_deleted.emplace_back(key_bytes);
  const EntryId id = s.map.Find(key);
  if (id == kNoEntry) return;
  s.Erase(id);
}

void Keyspace::LoadClear(LoadSource source) {
  View all = LockAll();
  for (size_t i = 0; i < kStripeCount; ++i) {
    StripeState& s = stripe(i);
    s.map.Clear();
    s.ClearDatabaseCounts();
    s.deadlines.clear();
    s.expiry_queue = {};
    s.deleted.clear();
    s.checkpoint_dirty.clear();
    s.checkpoint_deleted.clear();
    s.UpdateMirrors();
  }
  if (source == LoadSource::kLog) checkpoint_clear_ = true;
}

Keyspace::CheckpointCursor Keyspace::TakeCheckpoint(const std::function<void()>& while_held) {
  CheckpointCursor cursor;
  View all = LockAll();
  if (while_held) while_held();
  cursor.clear_all = checkpoint_clear_ || checkpoint_full_;
  cursor.full = checkpoint_full_;
  checkpoint_clear_ = false;
  checkpoint_full_ = false;
  for (size_t i = 0; i < kStripeCount; ++i) {
    StripeState& s = stripe(i);
    cursor.ids[i].swap(s.checkpoint_dirty);
    cursor.deleted[i].swap(s.checkpoint_deleted);
  }
  checkpoint_backlog_.store(0, std::memory_order_relaxed);
  return cursor;
}

bool Keyspace::ReadCheckpoint(CheckpointCursor& cursor, size_t max_operations, CommitBatch* batch) {
  if (cursor.stripe == 0 && cursor.clear_all) batch->ClearAll();
  size_t operations = 0;
  for (; cursor.stripe < kStripeCount && operations < max_operations; ++cursor.stripe) {
    StripeState& s = stripe(cursor.stripe);
    std::lock_guard lock(s.mutex);
    // Whatever is read here was written in an epoch no newer than this one.
    cursor.newest_epoch = std::max(cursor.newest_epoch, s.last_write_epoch);
    for (const std::string& key : cursor.deleted[cursor.stripe]) {
      batch->AddDelete(key);
      ++operations;
      // A key deleted and then written again may hold an entry that an earlier checkpoint
      // read (and unmarked) while it was marked for this one: the put below the delete
      // would then be missing, and the tables would lose a key whose log this checkpoint
      // drops. Its current state follows the delete (a batch's puts apply after its
      // deletes), whatever its mark.
      const EntryId id = s.map.Find(HashedKey(key));
      if (id != CounterMap::kNoEntry && s.map.IsLive(id)) {
        batch->AddPut(key, CounterRecord{s.map.value(id), s.DeadlineOf(id)});
        ++operations;
      }
    }
    std::vector<EntryId> everything;
    if (cursor.full) {
      for (EntryId id = 0; id < s.map.entry_limit(); ++id) {
        if (s.map.IsLive(id)) everything.push_back(id);
      }
    }
    for (const EntryId id : cursor.full ? everything : cursor.ids[cursor.stripe]) {
      if (!s.map.IsLive(id)) continue;
      if (!cursor.full && !s.map.HasFlag(id, CounterMap::kCheckpointDirty)) continue;
      s.map.ClearFlag(id, CounterMap::kCheckpointDirty);
      batch->AddPut(s.map.key(id), CounterRecord{s.map.value(id), s.DeadlineOf(id)});
      ++operations;
    }
    std::vector<EntryId>().swap(cursor.ids[cursor.stripe]);
    std::vector<std::string>().swap(cursor.deleted[cursor.stripe]);
  }
  return cursor.stripe < kStripeCount;
}

void Keyspace::RequireFullCheckpoint() {
  View all = LockAll();
  checkpoint_full_ = true;
}

void Keyspace::RequireCheckpointOf(std::span<const SlotRange> ranges) {
  if (ranges.empty()) return;
  size_t marked = 0;
  for (auto& s : stripes_) {
    std::lock_guard lock(s->mutex);
    s->ForEachInSlots(ranges, [&](EntryId id) {
      if (s->map.HasFlag(id, CounterMap::kCheckpointDirty)) return;
      s->map.SetFlag(id, CounterMap::kCheckpointDirty);
      s->checkpoint_dirty.push_back(id);
      ++marked;
    });
  }
  checkpoint_backlog_.fetch_add(marked, std::memory_order_relaxed);
}

void Keyspace::ApplyReplicated(SlotRange slots, std::span<const CommitBatch* const> batches,
                               const std::function<void()>& while_held) {
  std::vector<HashedKey> keys;
  bool clear = false;
  for (const CommitBatch* batch : batches) {
    clear = clear || batch->clear_all();
    for (size_t i = 0; i < batch->delete_count(); ++i) keys.emplace_back(batch->delete_key(i));
    for (size_t i = 0; i < batch->put_count(); ++i) keys.emplace_back(batch->put_key(i));
  }
  View view = clear ? LockAll() : Lock(keys);
  size_t next = 0;  // keys[] follows the batches' operations in order
  for (const CommitBatch* batch : batches) {
    if (batch->clear_all()) view.ClearSlots(slots);
    for (size_t i = 0; i < batch->delete_count(); ++i) view.Delete(keys[next++]);
    for (size_t i = 0; i < batch->put_count(); ++i) view.Put(keys[next++], batch->put_record(i));
  }
  if (while_held) while_held();
}

size_t Keyspace::DropSlots(SlotRange slots) { return DropSlots(std::span(&slots, 1)); }

size_t Keyspace::DropSlots(std::span<const SlotRange> ranges) {
  if (ranges.empty()) return 0;
  const auto key_in_ranges = [ranges](std::string_view key) {
    return AnyContains(ranges, KeySlot(key));
  };
  View all = LockAll();
  size_t dropped = 0;
  for (auto& s : stripes_) {
    s->ForEachInSlots(ranges, [&](EntryId id) {
      s->Erase(id);
      ++dropped;
    });
    std::erase_if(s->deleted, key_in_ranges);
    std::erase_if(s->checkpoint_deleted, key_in_ranges);
  }
  return dropped;
}

bool Keyspace::OpenEpochWrittenLocked() {
  const uint64_t epoch = open_epoch_.load(std::memory_order_relaxed);
  // Anything written in it, even a write that changed nothing (a SET NX that did not
  // apply): its reply waits for the epoch to be durable.
  bool touched = clear_all_pending_;
  for (size_t i = 0; i < kStripeCount && !touched; ++i) {
    const StripeState& s = stripe(i);
    touched = !s.dirty.empty() || !s.deleted.empty() || s.last_write_epoch == epoch;
  }
  return touched;
}

uint64_t Keyspace::LastWrittenEpoch() {
  View all = LockAll();
  const uint64_t open = open_epoch_.load(std::memory_order_relaxed);
  return OpenEpochWrittenLocked() ? open : open - 1;
}

bool Keyspace::Drain(CommitBatch* batch) {
  View all = LockAll();
  const uint64_t epoch = open_epoch_.load(std::memory_order_relaxed);
  if (!OpenEpochWrittenLocked()) return false;

  open_epoch_.store(epoch + 1, std::memory_order_release);
  batch->set_epoch(epoch);
  if (clear_all_pending_) {
    batch->ClearAll();
    clear_all_pending_ = false;
    checkpoint_clear_ = true;
    for (auto& s : stripes_) {
      s->checkpoint_dirty.clear();
      s->checkpoint_deleted.clear();
    }
  }
  size_t marked = 0;
  for (size_t i = 0; i < kStripeCount; ++i) {
    StripeState& s = stripe(i);
    for (std::string& key : s.deleted) {
      batch->AddDelete(key);
      s.checkpoint_deleted.push_back(std::move(key));
      ++marked;
    }
    s.deleted.clear();
    for (const EntryId id : s.dirty) {
      if (!s.map.IsLive(id) || !s.map.HasFlag(id, CounterMap::kDirty)) continue;
      s.map.ClearFlag(id, CounterMap::kDirty);
      batch->AddPut(s.map.key(id), CounterRecord{s.map.value(id), s.DeadlineOf(id)});
      if (!s.map.HasFlag(id, CounterMap::kCheckpointDirty)) {
        s.map.SetFlag(id, CounterMap::kCheckpointDirty);
        s.checkpoint_dirty.push_back(id);
        ++marked;
      }
    }
    s.dirty.clear();
  }
  checkpoint_backlog_.fetch_add(marked, std::memory_order_relaxed);
  return true;
}

void Keyspace::TakeWriteSamples(std::vector<KeyWrites>* out) {
  for (auto& s : stripes_) {
    std::lock_guard lock(s->mutex);
    s->writes.Drain(out);
  }
}

size_t Keyspace::ReclaimExpired(size_t budget) {
  const int64_t now = clock_->NowMillis();
  size_t removed = 0;
  // Start where the last call stopped, so that a small budget still reaches every stripe.
  const size_t first = reclaim_next_stripe_;
  for (size_t n = 0; n < kStripeCount && removed < budget; ++n) {
    const size_t i = (first + n) % kStripeCount;
    reclaim_next_stripe_ = (i + 1) % kStripeCount;
    StripeState& s = stripe(i);
    std::lock_guard lock(s.mutex);
    while (removed < budget && !s.expiry_queue.empty() && s.expiry_queue.top().first <= now) {
      const auto [deadline, id] = s.expiry_queue.top();
      s.expiry_queue.pop();
      if (!s.map.IsLive(id) || !s.map.HasFlag(id, CounterMap::kHasExpiry) ||
          s.deadlines.find(id)->second != deadline) {
        continue;  // stale: the key's deadline changed or the key is gone
      }
      s.Remove(id);
      ++removed;
    }
    s.CompactExpiryQueue();
  }
  if (removed > 0 && on_write_) on_write_();
  return removed;
}

uint64_t Keyspace::Scan(uint64_t cursor, size_t count,
                        const std::function<bool(std::string_view)>& match,
                        std::vector<std::string>* keys, bool stripes_held) {
  size_t stripe_index = cursor >> 32;
  auto id = static_cast<EntryId>(cursor & 0xFFFFFFFFu);
  size_t visited = 0;
  const int64_t now = clock_->NowMillis();
  while (stripe_index < kStripeCount) {
    StripeState& s = stripe(stripe_index);
    {
      std::unique_lock lock(s.mutex, std::defer_lock);
      if (!stripes_held) lock.lock();
      const EntryId limit = s.map.entry_limit();
      for (; id < limit && visited < count; ++id, ++visited) {
        if (!s.map.IsLive(id)) continue;
        if (s.map.HasFlag(id, CounterMap::kHasExpiry) && s.DeadlineOf(id) <= now) continue;
        const std::string_view key = s.map.key(id);
        if (!match || match(key)) keys->emplace_back(key);
      }
      if (id < limit) return (uint64_t{stripe_index} << 32) | id;
    }
    ++stripe_index;
    id = 0;
    if (visited >= count) break;
  }
  if (stripe_index >= kStripeCount) return 0;
  return uint64_t{stripe_index} << 32;
}

size_t Keyspace::size() const {
  size_t total = 0;
  for (const auto& s : stripes_) total += s->size.load(std::memory_order_relaxed);
  return total;
}

size_t Keyspace::database_size(uint32_t db) const {
  size_t total = 0;
  for (const auto& s : stripes_) total += s->database_size[db].load(std::memory_order_relaxed);
  if (db != 0) return total;
  // Database 0's are the rest; the mirrors are read apart, so clamp a passing skew.
  const size_t all = size();
  return all > total ? all - total : 0;
}

size_t Keyspace::database_expiring(uint32_t db) const {
  size_t total = 0;
  for (const auto& s : stripes_) total += s->database_expiring[db].load(std::memory_order_relaxed);
  if (db != 0) return total;
  const size_t all = expiring_count();
  return all > total ? all - total : 0;
}

size_t Keyspace::expiring_count() const {
  size_t total = 0;
  for (const auto& s : stripes_) total += s->expiring.load(std::memory_order_relaxed);
  return total;
}

uint64_t Keyspace::increments_applied() const {
  uint64_t total = 0;
  for (const auto& s : stripes_) total += s->increments.load(std::memory_order_relaxed);
  return total;
}

size_t Keyspace::memory_bytes() const {
  size_t total = 0;
  for (const auto& s : stripes_) total += s->memory.load(std::memory_order_relaxed);
  return total;
}

}  // namespace tally::engine
