// DerivedCounters: counters declared as SQL aggregates over a source (CREATE COUNTER) and
// kept by the universal formula from each pushed change's old and new row.
//
// Where the values live. A derived counter is a plain counter of the engine's keyspace
// under its canonical key (definitions/value.h: "blog_posts:7:3"), so it is durable,
// recovered and readable with GET like any other. Applying a batch of changes locks the
// stripes of every key it touches in one View and writes all its increments in it: one
// commit epoch, so a batch is visible together and durable together, or not at all. A
// group whose value returns to 0 is deleted. Plain Redis writes to a derived key are
// refused (IsProtectedKey), so only the formula moves a derived counter.
//
// Idempotency. A change or batch with an id leaves a marker counter "\0id:<id>" with an
// expiry of the idempotency window, written in the same View as its increments: the
// marker is durable exactly when the increments are, survives restarts, and is reclaimed
// like any expired counter. A resend finds the marker and is acknowledged unapplied.
//
// Families. Each counter keeps an in-memory ordered index of its live keys (rebuilt at
// start from the keyspace) for prefix listings and top-K; values are always read from
// the keyspace. A top-K answer is cached per (counter, prefix, k) and recomputed when the
// counter changed and the cached answer is older than top_k_max_staleness_ms.
//
// Source streams. A transaction of a database's change stream (PostgreSQL logical
// replication) is applied the same way, together with the source's position (its commit
// LSN) as a record "\0pos:<source>" in the same View: after any crash the stored position
// says exactly which transactions are counted, and a replayed one is skipped. A
// verification hold (Hold) stops the stream at one position so that `tally verify` can
// compare the counters with the database's snapshot of that position.
//
// Retention. A counter defined WITH (retention = '30 days') keeps its time buckets (its one
// date_trunc key column) while any instant of them is within the retention of now, by the
// engine's clock: a bucket goes once its end is at or before now - retention (the rule is
// definitions::BucketExpired). A sweep (SweepRetention: at Load, then every
// retention_sweep_interval_ms on a thread of its own) deletes the expired groups through
// ordinary keyspace deletes, so the committer makes the removal durable, and drops them from
// the family index; a second index per such family, by bucket start, hands the sweep the
// oldest groups first, so a sweep costs what it removes. A change that arrives for a bucket
// already expired (an UPDATE of an old row) is skipped, for that bucket only: decided under
// the keys' locks with the clock read there, so it can never bring back a swept bucket with
// a partial value. Range reads (Range) sum a group's buckets between two instants, expired
// ones counted as gone even before the sweep; other reads see a bucket until it is swept.
//
// The catalog (sources and definitions) is kept in the store's catalog records, written
// durably before a DDL statement is acknowledged, and loaded at start. DDL excludes pushes
// for its duration (a shared mutex), so a definition appears or disappears between batches.
#pragma once

#include <absl/container/flat_hash_set.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/persistence.h"
#include "engine/definitions/ast.h"
#include "engine/definitions/program.h"
#include "engine/derived/change_json.h"
#include "engine/engine.h"

namespace tally {
class PeriodicThread;
}  // namespace tally

namespace tally::derived {

// tally's own records in the keyspace: idempotency markers ("\0id:<id>") and source
// positions ("\0pos:<source>"). No counter name holds a NUL byte, so no derived key starts
// like this; plain writes to such keys are refused and listings of the keyspace hide them.
// Other keys that start with a NUL byte are ordinary binary keys.
inline constexpr std::string_view kIdMarkerPrefix{"\0id:", 4};
inline constexpr std::string_view kPositionPrefix{"\0pos:", 5};
inline bool IsInternalKey(std::string_view key) {
  return key.starts_with(kIdMarkerPrefix) || key.starts_with(kPositionPrefix);
}

struct DerivedOptions {
  int64_t idempotency_window_ms = 24LL * 3600 * 1000;  // how long an id is remembered
  int64_t top_k_max_staleness_ms = 1000;               // the bound on a top-K answer's age
  size_t max_batch_changes = 1'000'000;                // most changes in one push
  // How often the retention sweep runs (StartRetentionSweeper), and how many expired
  // groups one sweep removes at most: bounds each sweep's work; the rest waits a turn.
  int64_t retention_sweep_interval_ms = 1000;
  size_t retention_sweep_budget = 10'000;
};

// What one statement of a DDL script did.
struct StatementOutcome {
  std::string
      message;  // "CREATE COUNTER blog_posts", "DROP COUNTER x", "CREATE SOURCE posts (unchanged)"
};

// Whether a counter's groups are whole (see DerivedCounters::MarkStreamed).
enum class CounterState : uint8_t {
  kCounting,     // every change counts: its groups equal its SELECT
  kPending,      // waits for its backfill: nothing moves it, it has no groups
  kBackfilling,  // its snapshot's rows are being applied: its groups are partial
};
// "counting", "pending", "backfilling".
std::string_view CounterStateName(CounterState state);

// A counter definition as listed by SHOW COUNTERS.
struct CounterListing {
  std::string name;
  std::string source;
  std::string sql;                       // the normalised CREATE COUNTER statement
  std::vector<std::string> key_columns;  // "user_id int64", ...
  size_t groups = 0;                     // live keys
  CounterState state = CounterState::kCounting;
};

// A source schema as listed by SHOW SOURCES.
struct SourceListing {
  std::string name;
  std::string sql;  // the normalised CREATE SOURCE statement
};

// The outcome of one push.
struct PushOutcome {
  size_t changes = 0;           // changes in the request
  size_t applied = 0;           // changes applied now
  size_t duplicates = 0;        // changes skipped: their id (or the batch's) was seen before
  size_t increments = 0;        // counter keys written
  size_t expired = 0;           // increments skipped: their time bucket is past retention
  uint64_t required_epoch = 0;  // the reply may leave once this epoch is durable
};

// One change of a source's own change stream (PostgreSQL logical replication): rows in
// the source's schema order, or a TRUNCATE of the source (every counter on it back to 0).
struct SourceRowChange {
  std::optional<std::vector<definitions::Value>> old_row;
  std::optional<std::vector<definitions::Value>> new_row;
  bool truncate = false;
};

// The changes of one source within a source transaction: views of the caller's rows,
// which must live for the ApplyTransaction call.
struct SourceTransactionPart {
  std::string_view source;
  std::span<const SourceRowChange> changes;
};

// A verification hold (see DerivedCounters::Hold).
struct HoldState {
  bool held = false;
  int64_t position = 0;
  bool reached = false;  // every source transaction up to `position` is applied
};

// One counter value of a read.
struct KeyValue {
  std::string key;  // canonical
  int64_t value = 0;
};

// The outcome of a range read: the sum of a group's time buckets between two instants.
struct RangeSum {
  int64_t sum = 0;
  size_t buckets = 0;  // the buckets summed (those holding a value)
  uint64_t required_epoch = 0;
};

// A page of a family listing.
struct Page {
  std::vector<KeyValue> items;
  std::string next_cursor;  // empty when this was the last page
  uint64_t required_epoch = 0;
};

class DerivedCounters {
 public:
  // `engine` must be started (its counters loaded) and outlive this object.
  DerivedCounters(engine::Engine& engine, engine::Persistence& store, DerivedOptions options);
  ~DerivedCounters();
  DerivedCounters(const DerivedCounters&) = delete;
  DerivedCounters& operator=(const DerivedCounters&) = delete;

  // Loads the catalog, compiles every definition, rebuilds the family indexes from the
  // keyspace and finishes any DROP COUNTER a crash interrupted. Once, before any use.
  Status Load();

  // Runs a script of CREATE SOURCE / CREATE COUNTER / DROP COUNTER / DROP SOURCE /
  // SHOW statements, each durable before the next; stops at the first error (the
  // statements before it stay done). A CREATE of something that exists with the same
  // definition is a no-op, so a definitions file can be applied at every start.
  Result<std::vector<StatementOutcome>> Execute(std::string_view script);
  // DROP COUNTER `name` (kNotFound when there is none).
  Result<StatementOutcome> Drop(std::string_view name);

  // The counters and sources, by name.
  std::vector<CounterListing> Counters() const;
  std::vector<SourceListing> Sources() const;

  // Decodes and applies a body of changes (see change_json.h) atomically. `batch_id`
  // (may be empty) makes the whole request idempotent. The decoder is the caller's, one
  // per thread. Nothing is applied when an error is returned.
  //
  // With `only_counter`, the changes move that counter alone: a backfill. A counter
  // created on a server that already counts starts at zero; pushing the existing rows as
  // inserts this way gives it their counts without counting them again in the others.
  Result<PushOutcome> Push(std::string_view body, std::string_view batch_id, ChangeDecoder& decoder,
                           std::string_view only_counter = {});

  // Applies one transaction of `source`'s change stream atomically *together with* the
  // source's new `position` (its commit LSN): one commit epoch holds the increments and
  // the position, so after any crash the stored position says exactly which transactions
  // are counted. A transaction at or below the stored position is skipped (outcome.applied
  // = 0): it was counted before. An error (a row that does not fit, a counter that would
  // overflow) applies nothing; the stream must stop there. With `position` 0 no position
  // is written (a backfill chunk).
  Result<PushOutcome> ApplyTransaction(std::string_view source,
                                       std::span<const SourceRowChange> changes, int64_t position);
  // The same for a transaction that touched several sources: all parts, and every part's
  // source position, in one commit. A part whose source is already at or past `position`
  // is skipped.
  Result<PushOutcome> ApplyTransaction(std::span<const SourceTransactionPart> parts,
                                       int64_t position);

  // Verification (tally verify) needs the counters to stand still at one source position
  // while it compares them with the database's snapshot of that position. Hold(p): from
  // now on a source transaction above p waits before it is applied, until Release(). The
  // hold is *reached* once everything up to p is applied: when such a transaction arrives,
  // or the stream reports (MarkStreamAt) that it has delivered everything up to p.
  Status Hold(int64_t position);
  void MarkStreamAt(int64_t position);
  HoldState hold_state() const;
  void Release();
  // Sets groups of `counter` to the given values (0 deletes the group), all in one commit:
  // the repair of tally verify. Returns the epoch to wait for.
  Result<uint64_t> Repair(std::string_view counter, std::span<const KeyValue> values);
  // The stored position of `source`; 0 when none (never streamed, or reset).
  int64_t SourcePosition(std::string_view source);
  // Deletes every group of every counter on `source`, and its position (a backfill that
  // must start again). Durable when it returns.
  Status ResetSource(std::string_view source);
  // Backfill of a counter added while its source is streamed (issue 4). MarkStreamed(s):
  // from now on a CREATE COUNTER on `s` makes the counter *pending* (catalog record
  // "start/<name>" = "pending"): no change moves it until the stream's runner activates
  // it at the consistent point C of a fresh snapshot. Then the source transactions at or
  // below C skip it (the snapshot holds them) and those above count, while the snapshot's
  // rows are applied to it alone (ApplyBackfill). A crash between ActivateCounter and
  // FinishBackfill leaves a "backfill/<name>" marker: Load deletes the counter's groups and
  // makes it pending again, so the backfill is redone whole. Counters created before the
  // source is streamed, or on a source that is not, start at 0 (every transaction counts).
  void MarkStreamed(std::string_view source);
  // MarkStreamed for every source, present and future: with tallyd --source every source
  // is a table of the database, so a counter on a table not followed yet waits for the
  // runner to follow that table too and backfill the counter.
  void MarkEverySourceStreamed();
  // The pending counters of `source`, by name.
  std::vector<std::string> PendingCounters(std::string_view source) const;
  // Activates pending counter `name` at consistent point `position`: false (nothing done)
  // when the source's stored position is already past it (reset the counter's groups and
  // retry with a new snapshot); else the start and the backfill marker are durable.
  Result<bool> ActivateCounter(std::string_view name, int64_t position);
  // The snapshot's rows of `counter`'s source, applied as inserts to `counter` alone, in
  // one commit. The counter must be active (ActivateCounter).
  Result<PushOutcome> ApplyBackfill(std::string_view counter,
                                    std::span<const SourceRowChange> rows);
  // Removes the backfill marker: the counter's backfill is complete. Durable when it returns.
  Status FinishBackfill(std::string_view name);
  // Deletes every group of `name` and makes it pending again (when it is on a streamed
  // source). Durable when it returns.
  Status ResetCounter(std::string_view name);
  // The start position of a counter: 0 (counts everything), INT64_MAX (pending) or C.
  Result<int64_t> CounterStart(std::string_view name) const;

  // Per column of `source`: does a counter read it? (Empty when there is no such source.)
  std::vector<bool> ColumnsRead(std::string_view source) const;
  // The schema of a source, when it exists.
  std::optional<definitions::SourceSchema> SourceSchemaOf(std::string_view source) const;

  // The canonical key of `counter`'s group given as parts (ParseKeyPart), all of them.
  Result<std::string> KeyOf(std::string_view counter,
                            std::span<const std::string_view> parts) const;
  // The key prefix "counter:part:...:" of the first parts.size() key columns.
  Result<std::string> PrefixOf(std::string_view counter,
                               std::span<const std::string_view> parts) const;

  // Values of canonical keys (missing = 0). `required_epoch` is raised to what the reply
  // depends on.
  std::vector<int64_t> Get(std::span<const std::string> keys, uint64_t* required_epoch);

  // The live groups of `counter` whose key starts with `prefix` (from PrefixOf), in key
  // byte order, after `cursor` (a key from a previous page; empty = from the start).
  Result<Page> List(std::string_view counter, std::string_view prefix, std::string_view cursor,
                    size_t limit);

  // The `k` largest groups of `counter` under `prefix`, largest first (ties by key).
  Result<Page> Top(std::string_view counter, std::string_view prefix, size_t k);

  // The sum of the time buckets of one group of `counter` whose start lies in [from, to):
  // `parts` are the values of every key column but the time bucket, in order (ParseKeyPart
  // spellings); `from` and `to` are instants written as ISO 8601 ("2024-05-01T00:00:00Z",
  // with an offset or none for UTC), the key spelling ("20240501T000000Z") or Unix seconds
  // ("1714521600"; eight digits are refused: "20240501" would be a date as much as seconds).
  // Buckets past retention count as gone. Errors: kNotFound (no such counter),
  // kInvalidArgument (no single time bucket, wrong parts, a bad or ambiguous instant, from
  // after to), kOverflow (the sum leaves the int64 range). Costs one step of the family
  // index per bucket of the group within [from, to) (or per bucket of the group when an
  // instant lies outside years 0-9999 or is not a whole second).
  Result<RangeSum> Range(std::string_view counter, std::span<const std::string_view> parts,
                         std::string_view from, std::string_view to);

  // Removes up to `budget` groups whose time bucket is past retention (see Retention
  // above); waits until the removal is durable. Returns how many it removed. Within a
  // counter the oldest buckets go first; the counters with a retention are taken in turn
  // (by name), starting after the one the previous sweep last removed from, so that one
  // with more expired groups than the budget does not starve the others. Sweeps run one
  // at a time.
  size_t SweepRetention(size_t budget);
  // Runs SweepRetention(retention_sweep_budget) every retention_sweep_interval_ms on a
  // thread of its own (none when the interval is 0), until StopRetentionSweeper or
  // destruction. Call once, after Load.
  void StartRetentionSweeper();
  // Stops and joins the sweeper; before the engine stops. Idempotent.
  void StopRetentionSweeper();

  // True for a key plain writes must not touch: a derived counter's or an id marker.
  bool IsProtectedKey(std::string_view key) const;
  // The error a plain write to a protected key gets.
  std::string ProtectedKeyError(std::string_view key) const;

  // FLUSHALL empties the keyspace; the indexes follow. REQUIRES: every stripe held.
  void OnFlushAll();

  // Totals for INFO: changes applied, and pushes refused whole.
  uint64_t changes_applied() const { return changes_applied_.load(std::memory_order_relaxed); }
  uint64_t pushes_refused() const { return pushes_refused_.load(std::memory_order_relaxed); }
  // Of changes_applied(), those pushed (Push) and those of source streams (ApplyTransaction),
  // each counted on its own so that both only grow.
  uint64_t pushed_changes_applied() const {
    return pushed_changes_applied_.load(std::memory_order_relaxed);
  }
  uint64_t source_changes_applied() const {
    return source_changes_applied_.load(std::memory_order_relaxed);
  }
  // Counter keys written by applied changes (PushOutcome::increments, summed): one per
  // group a change (or transaction) moved, a group back at 0 deleted included.
  uint64_t keys_written() const { return keys_written_.load(std::memory_order_relaxed); }

 private:
  struct Catalog;
  struct Family;
  struct NameSet;
  struct SourceEntry;
  struct PushScratch;

  std::shared_ptr<const Catalog> Snapshot() const;
  // Replaces the catalog and the protected names. REQUIRES: apply_mutex_ held exclusively.
  void Install(std::shared_ptr<const Catalog> catalog);
  Result<std::string> CreateSource(const definitions::CreateSource& create);
  Result<std::string> DropSource(const definitions::DropSource& drop);
  Result<std::string> CreateCounter(const definitions::CreateCounter& create);
  Result<std::string> DropCounter(std::string_view name);
  // Deletes every key of `family` and waits until the deletions are durable.
  void DeleteGroups(Family& family);
  // Runs the formula of every counter on each change's source (or `only_counter`) into
  // `scratch`; nothing is written. The error names the change.
  // Families whose start is at or above `limit` are skipped (INT64_MAX: only pending ones).
  Status RunFormula(const Catalog& catalog, std::span<const DecodedChange> changes,
                    std::string_view only_counter, int64_t limit, PushScratch& scratch);
  // ApplyTransaction, optionally restricted to one counter (a backfill chunk).
  Result<PushOutcome> ApplyParts(std::span<const SourceTransactionPart> parts, int64_t position,
                                 std::string_view only_counter);
  // Sums the increments of the changes not marked to skip per key, checks that every
  // result fits, then writes them all (a group back at 0 is deleted). Nothing is written
  // on error. REQUIRES: `view` holds every key of the increments.
  Status WriteSums(engine::View& view, PushScratch& scratch, PushOutcome* outcome);
  // Blocks until `epoch` is durable, committing on this thread when nobody else is.
  void WaitDurable(uint64_t epoch);

  engine::Engine& engine_;
  engine::Persistence& store_;
  const DerivedOptions options_;
  mutable std::shared_mutex apply_mutex_;  // pushes shared, DDL exclusive
  mutable std::mutex catalog_mutex_;
  std::shared_ptr<const Catalog> catalog_;  // guarded by catalog_mutex_; immutable
  // The names of defined counters, for IsProtectedKey without a lock: replaced whole by
  // DDL; old sets are kept until destruction so a reader never sees one freed.
  std::atomic<const NameSet*> protected_names_{nullptr};
  std::vector<std::unique_ptr<const NameSet>> retired_names_;  // guarded by catalog_mutex_
  mutable std::mutex hold_mutex_;
  std::condition_variable hold_changed_;
  HoldState hold_;                             // guarded by hold_mutex_
  absl::flat_hash_set<std::string> streamed_;  // guarded by apply_mutex_
  bool every_source_streamed_ = false;         // guarded by apply_mutex_
  // MarkStreamed(source) or MarkEverySourceStreamed(). REQUIRES: apply_mutex_ held.
  bool IsStreamed(std::string_view source) const;
  std::atomic<uint64_t> changes_applied_{0};
  std::atomic<uint64_t> pushes_refused_{0};
  std::atomic<uint64_t> pushed_changes_applied_{0};
  std::atomic<uint64_t> source_changes_applied_{0};
  std::atomic<uint64_t> keys_written_{0};
  std::mutex sweep_mutex_;   // one SweepRetention at a time
  std::string sweep_after_;  // guarded by sweep_mutex_: the family last swept from
  // Runs SweepRetention periodically; null when retention_sweep_interval_ms is 0.
  std::unique_ptr<PeriodicThread> sweeper_;
};

}  // namespace tally::derived
