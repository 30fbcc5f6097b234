// DerivedCounters: counters declared as SQL aggregates over a source (CREATE COUNTER) and
// kept by the universal formula from each change's old and new row. The one API of the
// derived layer for the servers (Redis, HTTP), the PostgreSQL source and tallyd: a facade
// that takes the locks and hands each call to the part that does it.
//
// Where the values live. A derived counter is a plain counter of the engine's keyspace
// under its canonical key (definitions/value.h: "blog_posts:7:3"), so it is durable,
// recovered and readable with GET like any other; a group whose value returns to 0 is
// deleted. Plain Redis writes to a derived key are refused (IsProtectedKey), so only the
// formula moves a derived counter. The records the layer keeps beside them (idempotency
// markers, source positions) are described in derived_keyspace.h.
//
// The parts, each with its contract in its header:
//   catalog.h            sources and definitions: DDL, their durable records, Load
//   apply.h              a batch of decoded changes → the formula → increments, written
//                        atomically in one View with idempotency markers or positions
//   verification_hold.h  stops source streams at a position for tally verify
//   backfill.h           a counter created mid-stream: pending → backfilling → counting
//   family_reads.h       KeyOf, PrefixOf, List, Top and Range over a family's index
//   retention_sweeper.h  removes time buckets past their counter's retention
//   family.h             one counter in memory: definition, start, index of its groups
//   derived_keyspace.h   the layer's keys and its bulk reads and deletes of them
//
// Thread-safety. Every method may be called from any thread, concurrently, except Load
// (once, before any other) and OnFlushAll (REQUIRES: every stripe held). One lock orders
// the parts, the apply lock (a shared mutex): held shared by every apply (Push,
// ApplyTransaction, ApplyBackfill, Repair, RepairStates), by retention sweeps and by the
// reads of a counter's start (Counters, PendingCounters, CounterStart); held exclusively by DDL
// (Execute, Drop), by the backfill state changes (MarkStreamed, MarkEverySourceStreamed,
// ActivateCounter, ResetCounter, ResetSource) and by Load; FinishBackfill needs neither
// (it clears an atomic flag once its record is durable). So a definition appears or
// disappears, and a counter's start moves, between two batches, never within one. Reads
// of values (Get, KeyOf, PrefixOf, List, Top, Range, SourcePosition) take no apply lock:
// they use an immutable catalog snapshot and the keyspace's stripe locks. Nested locks are
// taken in this order: the apply lock, the sweeper's mutex, stripes (Views), a family's
// index mutex; the catalog's snapshot mutex and the hold's mutex are never held while
// another is taken. Calls that block: ApplyTransaction above a verification hold (until
// Release, before it takes any lock); DDL, resets, Load and SweepRetention until what they
// wrote is durable. One thread of its own: the retention sweeper (StartRetentionSweeper).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/commit_batch.h"
#include "engine/definitions/program.h"
#include "engine/derived/apply.h"
#include "engine/derived/backfill.h"
#include "engine/derived/catalog.h"
#include "engine/derived/change_json.h"
#include "engine/derived/derived_keyspace.h"
#include "engine/derived/family.h"
#include "engine/derived/family_reads.h"
#include "engine/derived/retention_sweeper.h"
#include "engine/derived/verification_hold.h"
#include "engine/engine.h"
#include "engine/persistence.h"

namespace tally {
class PeriodicThread;
}  // namespace tally

namespace tally::derived {

struct DerivedOptions {
  int64_t idempotency_window_ms = 24LL * 3600 * 1000;  // how long an id is remembered
  int64_t top_k_max_staleness_ms = 1000;               // the bound on a top-K answer's age
  size_t max_batch_changes = 1'000'000;                // most changes in one push
  // How often the retention sweep runs (StartRetentionSweeper), and how many expired
  // groups one sweep removes at most: bounds each sweep's work; the rest waits a turn.
  int64_t retention_sweep_interval_ms = 1000;
  size_t retention_sweep_budget = 10'000;
  // A cluster node: a backfill interrupted by a crash is left as it stands at Load (the
  // counter shows kBackfilling) rather than redone here, since its groups live in
  // partitions other nodes own; the cluster's source consumer resets and redoes it through
  // the change stream (ResetShares, ResetCounterState).
  bool keep_interrupted_backfills = false;
};

// The changes of one source within a source transaction: views of the caller's rows,
// which must live for the ApplyTransaction call.
struct SourceTransactionPart {
  std::string_view source;
  std::span<const SourceRowChange> changes;
};

class DerivedCounters {
 public:
  // `engine` must be started (its counters loaded) and outlive this object, as `store`.
  DerivedCounters(engine::Engine& engine, engine::Persistence& store, DerivedOptions options);
  ~DerivedCounters();
  DerivedCounters(const DerivedCounters&) = delete;
  DerivedCounters& operator=(const DerivedCounters&) = delete;

  // Loads the catalog, compiles every definition, rebuilds the family indexes from the
  // keyspace, finishes any DROP COUNTER a crash interrupted, makes any counter whose
  // backfill a crash interrupted pending again, and removes the time buckets that expired
  // meanwhile. Once, before any use.
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
  // (may be empty) makes the whole request idempotent; so does each change's id, for
  // that change, for the idempotency window. The decoder is the caller's, one per thread.
  // Nothing is applied when an error is returned: the decoder's errors, kNotFound (no
  // such `only_counter`), kInvalidArgument (more than max_batch_changes changes, a row the
  // formula refuses), kOverflow.
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
  // = 0): it was counted before. An error (kNotFound: no such source; a row that does not
  // fit, a counter that would overflow: see apply.h) applies nothing; the stream must stop
  // there. With `position` 0 no position is written (a backfill chunk). Waits first while
  // a verification hold below `position` stands.
  Result<PushOutcome> ApplyTransaction(std::string_view source,
                                       std::span<const SourceRowChange> changes, int64_t position);
  // The same for a transaction that touched several sources: all parts, and every part's
  // source position, in one commit. A part whose source is already at or past `position`
  // is skipped.
  Result<PushOutcome> ApplyTransaction(std::span<const SourceTransactionPart> parts,
                                       int64_t position);

  // Verification (tally verify; see verification_hold.h). Hold(p): a source transaction
  // above p waits until Release(); kUnavailable while another hold stands, unless `replace`
  // (the hold moves to p). The hold is reached once everything up to p is applied: when such
  // a transaction arrives, or the stream reports (MarkStreamAt) that it has delivered
  // everything up to p. ReportHold adds the highest position any source has stored.
  Status Hold(int64_t position, bool replace = false);
  void MarkStreamAt(int64_t position);
  HoldState hold_state() const;
  HoldReport ReportHold();
  void Release();
  // Sets groups of `counter` to the given values (0 deletes the group), all in one commit:
  // the repair of tally verify. Returns the epoch to wait for. kNotFound (no such counter),
  // kInvalidArgument (a key that is not one of its groups; nothing is written).
  Result<uint64_t> Repair(std::string_view counter, std::span<const KeyValue> values);
  // The same for a counter that is not plain (count(DISTINCT), min, max, avg, several
  // aggregates): sets whole groups, each its key and every hidden record
  // (DerivedKeyspace::SetGroupStates), all in one commit. kNotFound (no such counter),
  // kInvalidArgument (a plain counter, a key that is not one of its groups, a state no group
  // can have; nothing is written).
  Result<uint64_t> RepairStates(std::string_view counter, std::span<const GroupStateValue> states);
  // The stored position of `source`; 0 when none (never streamed, or reset).
  int64_t SourcePosition(std::string_view source);
  // Deletes every group of every counter on `source`, and its position (a backfill that
  // must start again). Durable when it returns. kNotFound when there is no such source.
  Status ResetSource(std::string_view source);

  // Backfill of a counter created while its source is streamed (see backfill.h for why and
  // how). MarkStreamed(s): from now on a CREATE COUNTER on `s` makes the counter pending;
  // the stream's runner activates it at the consistent point of a fresh snapshot
  // (ActivateCounter), applies the snapshot's rows to it alone (ApplyBackfill) and
  // finishes it (FinishBackfill). Counters created before the source is streamed, or on a
  // source that is not, start at 0 (every transaction counts).
  void MarkStreamed(std::string_view source);
  // MarkStreamed for every source, present and future: with tallyd --source every source
  // is a table of the database, so a counter on a table not followed yet waits for the
  // runner to follow that table too and backfill the counter.
  void MarkEverySourceStreamed();
  // The pending counters of `source`, by name (none when there is no such source).
  std::vector<std::string> PendingCounters(std::string_view source) const;
  // Activates pending counter `name` at consistent point `position`: false (nothing done)
  // when the source's stored position is already past it (reset the counter's groups and
  // retry with a new snapshot); else the start and the backfill marker are durable.
  // kNotFound (no such counter), kInvalidArgument (not pending).
  Result<bool> ActivateCounter(std::string_view name, int64_t position);
  // The snapshot's rows of `counter`'s source, applied as inserts to `counter` alone, in
  // one commit. The counter must be active (ActivateCounter). kNotFound (no such counter).
  Result<PushOutcome> ApplyBackfill(std::string_view counter,
                                    std::span<const SourceRowChange> rows);
  // Removes the backfill marker: the counter's backfill is complete. Durable when it returns.
  Status FinishBackfill(std::string_view name);
  // Deletes every group of `name` and makes it pending again (when it is on a streamed
  // source). Durable when it returns. kNotFound (no such counter).
  Status ResetCounter(std::string_view name);
  // The start position of a counter: 0 (counts everything), INT64_MAX (pending) or C.
  Result<int64_t> CounterStart(std::string_view name) const;

  // Per column of `source`: does a counter read it? (Empty when there is no such source.)
  std::vector<bool> ColumnsRead(std::string_view source) const;
  // The schema of a source, when it exists.
  std::optional<definitions::SourceSchema> SourceSchemaOf(std::string_view source) const;

  // Reads (see family_reads.h for each one's errors). kNotFound when there is no counter
  // of that name.
  // The canonical key of `counter`'s group given as parts, all of them, each spelled as in
  // the key (key_part.h: "re\:turn", "\N" for NULL, "\\N" for the text \N).
  Result<std::string> KeyOf(std::string_view counter,
                            std::span<const std::string_view> parts) const;
  // The key prefix "counter:part:...:" of the first parts.size() key columns ("counter"
  // for a counter without key columns).
  Result<std::string> PrefixOf(std::string_view counter,
                               std::span<const std::string_view> parts) const;

  // Values of canonical keys (missing = 0). `required_epoch` is raised to what the reply
  // depends on.
  std::vector<int64_t> Get(std::span<const std::string> keys, uint64_t* required_epoch);

  // The groups `keys` of `counter` (from KeyOf; missing = 0) with their values as shown
  // (KeyValue::shown, for a counter whose value is not one integer), in order, none left
  // out. kNotFound when there is no such counter.
  // Page::names is set as for a listing.
  Result<Page> Read(std::string_view counter, std::span<const std::string> keys);

  // The live groups of `counter` whose key starts with `prefix` (from PrefixOf), in key
  // byte order, after `cursor` (a key from a previous page; empty = from the start).
  Result<Page> List(std::string_view counter, std::string_view prefix, std::string_view cursor,
                    size_t limit);

  // The `k` largest groups of `counter` under `prefix`, largest first (ties by key).
  Result<Page> Top(std::string_view counter, std::string_view prefix, size_t k);

  // The sum of the time buckets of one group of `counter` whose start lies in [from, to):
  // `parts` are the values of every key column but the time bucket (key_part.h); `from` and `to`
  // are instants (ISO 8601, the key spelling or Unix seconds). Buckets past retention count as
  // gone. Errors: kNotFound (no such counter), kInvalidArgument (no single time bucket,
  // wrong parts, a bad or ambiguous instant, from after to), kOverflow (the sum leaves the
  // int64 range).
  Result<RangeSum> Range(std::string_view counter, std::span<const std::string_view> parts,
                         std::string_view from, std::string_view to);

  // Removes up to `budget` groups whose time bucket is past retention (see
  // retention_sweeper.h); waits until the removal is durable. Returns how many it removed.
  // Sweeps run one at a time.
  size_t SweepRetention(size_t budget);
  // Runs SweepRetention(retention_sweep_budget) every retention_sweep_interval_ms on a
  // thread of its own (none when the interval is 0), until StopRetentionSweeper or
  // destruction. Call once, after Load.
  void StartRetentionSweeper();
  // Stops and joins the sweeper; before the engine stops. Idempotent.
  void StopRetentionSweeper();

  // True when `key` is a group of a counter whose value is not one integer (definitions::
  // ShowsInteger false: min, max, avg, count(DISTINCT), a numeric sum, several aggregates):
  // what its key holds is only a part of its value. Any thread; takes the catalog's leaf
  // lock only.
  bool ShowsMore(std::string_view key) const;
  // True for a key plain writes must not touch: a derived counter's or an id marker.
  bool IsProtectedKey(std::string_view key) const;
  // The error a plain write to a protected key gets.
  std::string ProtectedKeyError(std::string_view key) const;

  // FLUSHALL empties the keyspace; the indexes follow. REQUIRES: every stripe held.
  void OnFlushAll();

  // ---- On a cluster node (cluster/change_feed.h, docs/cluster.md) ------------------------
  // Definitions and pushes go through the cluster's ordered change stream; every node runs
  // the definitions in the stream's order, and each partition's owner applies its share of
  // each push, recording how far it got beside its counters.
  //
  // Runs a script taken from the change stream at `position`: as Execute, but a counter
  // created here starts at `position` (Catalog::Execute's start_at). SHOW statements do
  // nothing.
  Result<std::vector<StatementOutcome>> ExecuteAt(std::string_view script, int64_t position);
  // The keys a push would write, nothing written: what the node that takes a push checks
  // before it puts the push in the stream (the decoder's errors, kNotFound for
  // `only_counter`, kInvalidArgument for a change with an id of its own — a cluster makes
  // the whole push idempotent by its id — or for a counter that keeps records) and waits
  // for afterwards.
  // `changes` is set to the number of changes in the body.
  Result<std::vector<std::string>> PlanPush(std::string_view body, std::string_view only_counter,
                                            ChangeDecoder& decoder, size_t* changes);
  // Applies this node's shares of a push taken from the change stream at `position`
  // (Applier::ApplyShares). A body that does not decode any more (its source was dropped
  // or changed later in the stream: no counter it moved is left) only moves the shares'
  // position records.
  Result<PushOutcome> ApplyShares(std::string_view body, std::string_view only_counter,
                                  const ShareOrder& order, std::span<const PartitionShare> shares,
                                  const std::function<uint32_t(std::string_view)>& partition_of,
                                  ChangeDecoder& decoder, std::vector<uint32_t>* overflowed);
  // A reset or a TRUNCATE taken from the change stream (Applier::DeleteShares): every group
  // of `counter` (or, when it is empty, of every counter on `source`) in this node's due
  // shares is deleted, but for counters starting at or past order.limit. Nothing is deleted
  // for a counter or source gone since; the shares' records move all the same.
  void ResetShares(std::string_view source, std::string_view counter, const ShareOrder& order,
                   std::span<const PartitionShare> shares,
                   const std::function<uint32_t(std::string_view)>& partition_of);
  // tally verify's repair in a cluster (Applier::SetShares): CheckRepair, on the node that
  // takes COUNTER.REPAIR, refuses what Repair would (kNotFound, kInvalidArgument; also a
  // counter that keeps records) before it goes into the change stream; RepairShares sets this
  // node's due shares of it, taken from the stream (a counter gone since: only the shares'
  // records move). MarkShares moves the due shares' records alone: a position every owner
  // marks in its partitions (a verification hold reached).
  Status CheckRepair(std::string_view counter, std::span<const KeyValue> values) const;
  Result<uint64_t> RepairShares(std::string_view counter, std::span<const KeyValue> values,
                                const ShareOrder& order, std::span<const PartitionShare> shares,
                                const std::function<uint32_t(std::string_view)>& partition_of);
  void MarkShares(const ShareOrder& order, std::span<const PartitionShare> shares,
                  const std::function<uint32_t(std::string_view)>& partition_of);
  // The source a counter reads; nullopt when there is no such counter.
  std::optional<std::string> SourceOf(std::string_view counter) const;
  // The catalog's part of the same resets, run by every node at the reset's place in the
  // stream: ResetCounter's and ResetSource's changes of state (pending again, or counting
  // from 0; no backfill record), their groups left to ResetShares. A counter or source gone
  // since is no error. Durable when it returns.
  Status ResetCounterState(std::string_view name);
  Status ResetSourceState(std::string_view source);
  // Keeps the families' indexes in step with what a follower applied: `batches` in stream
  // order, each as a commit applies it (its deletes, then its puts), so that a group deleted
  // in one batch and back in a later one stays listed. Also a partition forgotten whole
  // (ForgetKeys). Any thread.
  void OnReplicated(std::span<const engine::CommitBatch* const> batches);
  void ForgetKeys(const std::function<bool(std::string_view key)>& forgotten);

  // Totals for INFO: changes applied, and pushes refused whole.
  uint64_t changes_applied() const { return changes_applied_.load(std::memory_order_relaxed); }
  uint64_t pushes_refused() const { return pushes_refused_.load(std::memory_order_relaxed); }
  // Of changes_applied(), those pushed (Push) and those of source streams (ApplyTransaction,
  // ApplyBackfill), each counted on its own so that both only grow.
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
  // What a push's body must meet beyond decoding: `only_counter` exists, at most
  // max_batch_changes changes.
  Status CheckPush(const CatalogSnapshot& catalog, size_t changes,
                   std::string_view only_counter) const;
  // ApplyTransaction, optionally restricted to one counter (a backfill chunk).
  Result<PushOutcome> ApplyParts(std::span<const SourceTransactionPart> parts, int64_t position,
                                 std::string_view only_counter);
  // Adds an applied outcome to the totals; `from_source`: of a source stream, else pushed.
  void Count(const PushOutcome& outcome, bool from_source);
  // Repair and RepairStates: `set` on the family of `counter`, under the apply lock held
  // shared. kNotFound when there is no such counter.
  Result<uint64_t> RepairFamily(std::string_view counter,
                                const std::function<Result<uint64_t>(Family&)>& set);

  const DerivedOptions options_;
  // Pushes, source transactions, sweeps and reads of starts shared; DDL and changes of
  // starts exclusive (see Thread-safety above).
  mutable std::shared_mutex apply_mutex_;
  DerivedKeyspace keyspace_;
  Catalog catalog_;
  Applier applier_;
  VerificationHold hold_;
  Backfill backfill_;  // its state guarded by apply_mutex_
  FamilyReads reads_;
  RetentionSweeper sweeper_;
  // Runs SweepRetention periodically; null when retention_sweep_interval_ms is 0.
  std::unique_ptr<PeriodicThread> sweep_thread_;
  std::atomic<uint64_t> changes_applied_{0};
  std::atomic<uint64_t> pushes_refused_{0};
  std::atomic<uint64_t> pushed_changes_applied_{0};
  std::atomic<uint64_t> source_changes_applied_{0};
  std::atomic<uint64_t> keys_written_{0};
};

}  // namespace tally::derived
