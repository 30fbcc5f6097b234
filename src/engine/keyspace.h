// Keyspace: every plain counter of a tally node, in memory, split into stripes.
//
// Concurrency design. The keyspace is split into kStripeCount stripes by key hash; each
// stripe is a CounterMap with its own mutex, expiry index and list of changes since the
// last commit. An operation locks only the stripes of its keys (a View), so writers of
// different keys rarely meet. Writers of ONE hot key are spread differently: each worker
// thread first sums its increments in its own IncrementBuffer (its shard of the counter)
// and folds them into the stripe once per event-loop turn, so N increments cost one lock
// and one lookup. The stripe's value is therefore the roll-up of every shard, kept by the
// engine: a read is one lookup under one lock, exact and O(1).
//
// Durability. Writes are stamped with the open commit epoch. The committer (see
// Committer) locks all stripes at once, closes the epoch, and drains the changed entries'
// current values into one CommitBatch: many increments of a counter inside one epoch
// become one write, and a transaction that held several stripes at once lands wholly in
// one epoch. A reply may reveal a value only once the epochs it depends on are durable
// (View::required_epoch()).
//
// Hot keys. Every write passes View::ForWrite under its stripe's lock; the stripe counts
// it there and offers one write in kWriteSampleEvery to its WriteSketch (see HotKeys).
//
// Expiry. Deadlines are absolute Unix milliseconds. An expired key is invisible to reads
// at once; writers remove it on touch; ReclaimExpired() removes the rest in the
// background, in deadline order within each stripe, a bounded amount per call.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <array>
#include <atomic>
#include <bitset>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/slot.h"
#include "core/status.h"
#include "engine/counter_map.h"
#include "engine/databases.h"
#include "engine/key_hash.h"
#include "engine/persistence.h"
#include "engine/write_sketch.h"

namespace tally::engine {

inline constexpr size_t kStripeCount = 128;

// One write in this many (per stripe) reaches the stripe's WriteSketch, weighted with the
// writes since the previous one: the hot-key sampling costs the write path a counter and
// a branch. A key taking a good share of its stripe's writes is sampled often either way.
inline constexpr uint64_t kWriteSampleEvery = 32;

inline size_t StripeOf(uint64_t hash) { return hash >> 57; }  // top 7 bits
static_assert(kStripeCount == 128);

// Which condition a SET must meet to apply (NX / XX).
enum class SetCondition { kAlways, kIfMissing, kIfExists };

// What SET does to an existing expiry.
enum class ExpiryAction { kClear, kKeep, kSetDeadline };

// Which condition EXPIRE-family commands must meet (NX / XX / GT / LT).
enum class ExpireCondition { kAlways, kIfNoExpiry, kIfHasExpiry, kIfGreater, kIfLess };

struct SetOptions {
  SetCondition condition = SetCondition::kAlways;
  ExpiryAction expiry = ExpiryAction::kClear;
  int64_t deadline_ms = 0;  // with kSetDeadline
};

struct SetOutcome {
  bool applied = false;
  std::optional<int64_t> previous;  // the value before, when there was one
};

// One increment's outcome when increments are applied in sequence.
struct IncrementOutcome {
  bool overflow = false;
  int64_t value = 0;  // the value right after this increment (unchanged on overflow)
};

class Keyspace;
namespace detail {
struct StripeState;
}  // namespace detail

// The locked stripes of one operation, and the operations themselves. Every key an
// operation passes must lie in a locked stripe. Unlocks on destruction. Not thread-safe;
// lives on one thread for the span of one command (or one transaction).
class View {
 public:
  View(View&& other) noexcept;
  View& operator=(View&&) = delete;
  ~View();

  // The value, or nullopt when the key is missing or expired.
  std::optional<int64_t> Get(const HashedKey& key);

  // Starts bringing the keys' index slots, entries and key bytes into the cache, all of
  // them at once, for the operations on them that follow. Worth it for a batch of keys
  // spread over a large keyspace, where each lookup would otherwise wait on its own misses.
  void Prefetch(std::span<const HashedKey> keys);

  // Adds `delta`; the new value, or an overflow error that changes nothing.
  Result<int64_t> IncrBy(const HashedKey& key, int64_t delta);

  // Applies `deltas` in order with one lookup; an increment that would overflow is skipped
  // and reported, the others apply.
  void IncrBySequence(const HashedKey& key, std::span<const int64_t> deltas,
                      std::span<IncrementOutcome> outcomes);

  // Adds `delta` and sets the deadline: always, or (only_if_no_expiry) only when the key
  // had none. A missing or expired key starts from 0.
  Result<int64_t> IncrByWithExpiry(const HashedKey& key, int64_t delta, int64_t deadline_ms,
                                   bool only_if_no_expiry);

  SetOutcome Set(const HashedKey& key, int64_t value, const SetOptions& options);

  // Puts a counter's final state as another node decided it (a follower applying its
  // partition's stream, cluster/follower.h): the value and the absolute deadline (0 =
  // none), whatever the key held. A deadline not in the future removes the key.
  void Put(const HashedKey& key, const CounterRecord& record);

  // True when the key existed (and was removed).
  bool Delete(const HashedKey& key);
  bool Exists(const HashedKey& key);

  // Milliseconds to live; -1 without expiry; -2 when missing (Redis's PTTL).
  int64_t TimeToLiveMillis(const HashedKey& key);
  // The absolute deadline; -1 without expiry; -2 when missing (Redis's PEXPIRETIME).
  int64_t DeadlineMillis(const HashedKey& key);

  // Sets the deadline when `condition` holds; a deadline not in the future deletes the key.
  // True when applied.
  bool Expire(const HashedKey& key, int64_t deadline_ms, ExpireCondition condition);

  // Removes the deadline. True when there was one.
  bool Persist(const HashedKey& key);

  // Removes every counter. REQUIRES: the view holds all stripes (Keyspace::LockAll).
  void FlushAll();
  // Removes every counter of database `db` (engine/databases.h), one deletion each, or the
  // whole store at once (FlushAll) when no other database has a counter. REQUIRES: the view
  // holds all stripes; db < kMaxDatabases.
  void FlushDatabase(uint32_t db);
  // Removes every counter whose slot (core/slot.h) lies in `slots`, one deletion each: a
  // replicated clear of one partition. REQUIRES: the view holds all stripes.
  void ClearSlots(SlotRange slots);

  // The commit epoch that must be durable before a reply built from this view may be sent.
  uint64_t required_epoch() const { return required_epoch_; }
  bool wrote() const { return wrote_; }
  // The time the view's operations use, read from the clock on first use only (most
  // operations touch no key with an expiry and never need it).
  int64_t now_ms() {
    if (now_ms_ < 0) now_ms_ = keyspace_clock_now();
    return now_ms_;
  }

 private:
  friend class Keyspace;
  explicit View(Keyspace* keyspace) : keyspace_(keyspace) {}
  int64_t keyspace_clock_now() const;

  detail::StripeState& ForRead(const HashedKey& key);
  // `writes`: how many writes of the key this is (a sequence of increments counts each).
  detail::StripeState& ForWrite(const HashedKey& key, uint64_t writes = 1);
  // The live entry, or kNoEntry when missing or expired (an expired one is removed when
  // `remove_expired`).
  CounterMap::EntryId LiveEntry(detail::StripeState& stripe, const HashedKey& key,
                                bool remove_expired);

  Keyspace* keyspace_;
  int64_t now_ms_ = -1;  // unread
  std::bitset<kStripeCount> locked_;
  uint64_t required_epoch_ = 0;
  bool wrote_ = false;
};

// The engine's table of plain counters. Thread-safe.
class Keyspace {
 public:
  explicit Keyspace(const Clock* clock);
  Keyspace(const Keyspace&) = delete;
  Keyspace& operator=(const Keyspace&) = delete;
  ~Keyspace();

  View Lock(const HashedKey& key);
  View Lock(std::span<const HashedKey> keys);
  View LockStripe(size_t index);
  View LockAll();

  // Called after a View that wrote is released; the committer hooks in here.
  void set_on_write(std::function<void()> on_write) { on_write_ = std::move(on_write); }

  // Replays stored state at start, before any other use: LoadPut puts a counter in place
  // (an expired one is dropped, and deleted from the store with the next commit). What
  // comes from the log is marked for the next checkpoint.
  void LoadPut(std::string_view key, const CounterRecord& record,
               LoadSource source = LoadSource::kTables);
  void LoadDelete(std::string_view key, LoadSource source = LoadSource::kTables);
  void LoadClear(LoadSource source = LoadSource::kTables);

  // Checkpoints (see Persistence). Every drained change marks its counter for the next
  // checkpoint. TakeCheckpoint() swaps those marks out; ReadCheckpoint() then fills
  // batches, a stripe at a time, with the marked counters' *current* values and the
  // deleted keys, and reports the newest epoch those values may come from.
  struct CheckpointCursor {
    bool clear_all = false;  // the tables must be emptied first (FLUSHALL, or `full`)
    bool full = false;       // write every counter, not only the marked ones
    size_t stripe = 0;
    std::array<std::vector<CounterMap::EntryId>, kStripeCount> ids;
    std::array<std::vector<std::string>, kStripeCount> deleted;
    uint64_t newest_epoch = 0;
  };
  // `while_held`, when set, runs while every stripe is held: what it reads (a follower's
  // applied position, an owner's assigned sequences) is a consistent cut with the marks
  // taken, since every writer of the keyspace updates those under its View.
  CheckpointCursor TakeCheckpoint(const std::function<void()>& while_held = nullptr);
  // Appends up to about `max_operations` operations; false once the cursor is exhausted.
  bool ReadCheckpoint(CheckpointCursor& cursor, size_t max_operations, CommitBatch* batch);
  // After a failed checkpoint: the next one writes every counter.
  void RequireFullCheckpoint();
  // The next checkpoint writes every counter in `ranges` (after their tables were emptied
  // behind a checkpoint's back). One stripe at a time: writers wait for one stripe's walk.
  void RequireCheckpointOf(std::span<const SlotRange> ranges);
  // Counters marked for the next checkpoint (approximate, may count one twice).
  size_t checkpoint_backlog() const { return checkpoint_backlog_.load(std::memory_order_relaxed); }

  // Applies batches that another node committed (the records of a partition's stream,
  // read by a follower) in order, as one change: a reader sees all of them or none. In
  // each batch, clear_all() clears the counters whose slot lies in `slots` (the
  // partition's), then the deletes and the puts (View::Put) apply. `while_held`, when set,
  // runs before the stripes are released (the follower records its applied position there).
  // The changes drain into the next CommitBatch like any write.
  void ApplyReplicated(SlotRange slots, std::span<const CommitBatch* const> batches,
                       const std::function<void()>& while_held = nullptr);

  // Forgets every counter whose slot lies in `slots` without telling the store: nothing of
  // it is drained or checkpointed (pending deletions of those keys are dropped too). For a
  // cluster node rebuilding a partition from its stream, which deletes the partition's key
  // range in the store itself. Returns how many counters it forgot.
  size_t DropSlots(SlotRange slots);
  // The same for several ranges, in one walk of the keyspace (each walk visits every
  // counter, under every stripe).
  size_t DropSlots(std::span<const SlotRange> ranges);

  // Closes the open epoch and moves every change made in it into `batch` (whose epoch it
  // sets; the batch may be empty when writes changed nothing). Returns false when nothing
  // was written in the epoch (it then stays open).
  bool Drain(CommitBatch* batch);
  // The newest epoch holding a write made so far: the open one when anything was written
  // in it (what Drain would close), else the one before (epochs close in order, and each
  // closed one held writes). Takes every stripe, so the open epoch and whether it was
  // written are read together: reading open_epoch() first and asking afterwards could miss
  // an epoch Drain closed in between.
  uint64_t LastWrittenEpoch();

  // Appends every stripe's sampled writes since the last call (WriteSketch::Drain). The
  // HotKeys thread's, about once a second.
  void TakeWriteSamples(std::vector<KeyWrites>* out);

  // Removes up to `budget` keys whose deadline has passed. Returns how many it removed.
  size_t ReclaimExpired(size_t budget);

  // One SCAN step from `cursor` (0 starts), visiting about `count` entries: appends the
  // live keys that `match` accepts (all when empty) and returns the next cursor (0 = done).
  // A key present from the first step to the last is returned exactly once. With
  // `stripes_held` the caller already holds every stripe (inside a transaction).
  uint64_t Scan(uint64_t cursor, size_t count, const std::function<bool(std::string_view)>& match,
                std::vector<std::string>* keys, bool stripes_held = false);

  size_t size() const;            // counters held, expired-but-not-reclaimed included
  size_t expiring_count() const;  // counters with a deadline
  // The same for one database (engine/databases.h); database 0's include tally's own
  // records. Lock-free, approximate while writers run. REQUIRES: db < kMaxDatabases.
  size_t database_size(uint32_t db) const;
  size_t database_expiring(uint32_t db) const;
  size_t memory_bytes() const;  // bytes of the maps and indexes
  // Increments applied since start, from every origin (an overflow refused is not one).
  uint64_t increments_applied() const;
  uint64_t open_epoch() const { return open_epoch_.load(std::memory_order_acquire); }
  const Clock* clock() const { return clock_; }

 private:
  friend class View;
  void ReleaseView(View& view);
  // OpenEpochWritten. REQUIRES: every stripe held.
  bool OpenEpochWrittenLocked();

  detail::StripeState& stripe(size_t i) { return *stripes_[i]; }

  const Clock* const clock_;
  std::array<std::unique_ptr<detail::StripeState>, kStripeCount> stripes_;
  // The epoch new writes belong to. Changed only while every stripe is locked.
  std::atomic<uint64_t> open_epoch_{1};
  bool clear_all_pending_ = false;  // FLUSHALL in the open epoch; guarded by all stripes
  bool checkpoint_clear_ = false;   // FLUSHALL since the last checkpoint; all stripes
  bool checkpoint_full_ = false;    // the next checkpoint writes everything; all stripes
  std::atomic<size_t> checkpoint_backlog_{0};
  size_t reclaim_next_stripe_ = 0;  // ReclaimExpired's caller only (the committer thread)
  std::function<void()> on_write_;
};

}  // namespace tally::engine
