// Catalog: the sources and derived counters a node knows — their definitions, their
// durable records (catalog_records.h) and the DDL that changes them.
//
// Each CREATE / DROP writes its records durably, then installs a new CatalogSnapshot
// (catalog_snapshot.h); readers and the apply path hold the snapshot they took. Load
// compiles every record at start, rebuilds each family's index from one pass over the
// keyspace and finishes any DROP COUNTER a crash interrupted. A derived counter owns the key
// "<name>" (the one group of a counter without key columns) and every key "<name>:..." of
// the keyspace (FamilyName): CREATE COUNTER refuses a name whose keys plain counters
// already use, and IsProtectedKey tells the servers which keys plain writes must not touch.
//
// Callers: DerivedCounters only (Load, Execute, Drop, the listings, IsProtectedKey), for
// tallyd's definitions file, the servers' DDL commands and their plain-write checks.
//
// Thread-safety. DerivedCounters serialises DDL against applies with its apply lock (see
// derived_counters.h): Load, Execute and DropCounter REQUIRE it held exclusively, so that
// a definition appears or disappears between two batches; Counters REQUIRES it held
// (shared or exclusive) because it reads each counter's start. Everything else may be
// called from any thread without it: Snapshot takes a short internal lock, IsProtectedKey
// none at all.
//
// Errors. Load: kCorruption when a record does not parse or compile, or the store's error.
// Execute: kInvalidArgument for a statement that does not compile or conflicts with what
// exists (the message says which and what to do), kNotFound for DROP COUNTER of a counter
// that does not exist, the store's error when a record cannot be written. A failed
// statement changes nothing, except a DROP COUNTER whose groups were being deleted: Load
// finishes it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/ast.h"
#include "engine/derived/catalog_snapshot.h"
#include "engine/derived/derived_keyspace.h"
#include "engine/persistence.h"

namespace tally::derived {

// What one statement of a DDL script did.
struct StatementOutcome {
  std::string
      message;  // "CREATE COUNTER blog_posts", "DROP COUNTER x", "CREATE SOURCE posts (unchanged)"
};

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

class Catalog {
 public:
  // Whether a counter created now on `source` must wait for a backfill (Backfill::IsStreamed).
  using StartsPending = std::function<bool(std::string_view source)>;

  // `store` and `keyspace` must outlive the catalog. It starts empty: Load fills it.
  Catalog(engine::Persistence& store, DerivedKeyspace& keyspace);
  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  // Reads and compiles every record, rebuilds the family indexes from the keyspace,
  // installs the result, and finishes the drops a crash interrupted (durable when it
  // returns). Returns the counters whose backfill a crash interrupted ("backfill/"
  // records), for Backfill::RedoInterrupted. Once, before any other use. REQUIRES: the
  // apply lock held exclusively.
  Result<std::vector<std::shared_ptr<Family>>> Load();

  // Runs one CREATE SOURCE / CREATE COUNTER / DROP COUNTER / DROP SOURCE statement,
  // durable when it returns, and says what it did. A CREATE of something that exists with
  // the same definition does nothing ("... (unchanged)"). A SHOW statement does nothing
  // here (the listings are Counters and Sources). REQUIRES: the apply lock held
  // exclusively.
  //
  // `start_at` (a cluster's change stream, see cluster/change_feed.h): a counter created
  // now starts at this position (changes at or before it do not move it), and plain
  // counters spelled like its keys are not looked for (the node that took the statement
  // did, and every node must decide alike whatever its keyspace holds at that moment) —
  // unless starts_pending says it is pending, which wins (a cluster following PostgreSQL).
  Result<std::string> Execute(const definitions::Statement& statement,
                              const StartsPending& starts_pending, int64_t start_at = 0);
  // DROP COUNTER `name`: durably marked dropping, its groups deleted, the mark removed.
  // REQUIRES: the apply lock held exclusively.
  Result<std::string> DropCounter(std::string_view name);

  // The current snapshot.
  std::shared_ptr<const CatalogSnapshot> Snapshot() const;

  // The counters, by name. REQUIRES: the apply lock held.
  std::vector<CounterListing> Counters() const;
  // The sources, by name.
  std::vector<SourceListing> Sources() const;
  // Per column of `source`: does a counter read it? (Empty when there is no such source.)
  std::vector<bool> ColumnsRead(std::string_view source) const;
  // The schema of a source, when it exists.
  std::optional<definitions::SourceSchema> SourceSchemaOf(std::string_view source) const;

  // True for a key plain writes must not touch: a defined (or still dropping) counter's
  // group, an id marker or a position record. Lock-free.
  bool IsProtectedKey(std::string_view key) const;
  // The error a plain write to a protected key gets.
  std::string ProtectedKeyError(std::string_view key) const;

 private:
  struct NameSet;

  // Mirrors the hidden records `records` (aggregate_state.h) in their families' states;
  // those of a counter being dropped, or of none, join `orphans`.
  void LoadRecords(const CatalogSnapshot& catalog, std::span<const std::string> records,
                   std::vector<std::string>* orphans);
  // Replaces the snapshot and the protected names.
  void Install(std::shared_ptr<const CatalogSnapshot> catalog);
  Result<std::string> CreateSource(const definitions::CreateSource& create);
  Result<std::string> DropSource(const definitions::DropSource& drop);
  Result<std::string> CreateCounter(const definitions::CreateCounter& create,
                                    const StartsPending& starts_pending, int64_t start_at);
  // A counter created from a cluster's change stream, just installed: groups of it may be in
  // the keyspace already — written by a partition's owner that ran the statement before this
  // node did, and applied here by a follower while this node had no such counter (so the
  // indexes' OnReplicated passed them by). Indexed now, after Install: from then on
  // OnReplicated indexes every group applied. (A group deleted meanwhile may stay listed in
  // the index; it reads 0, and listings leave those out.)
  void IndexGroupsPresent(Family& family);

  engine::Persistence& store_;
  DerivedKeyspace& keyspace_;
  mutable std::mutex mutex_;
  std::shared_ptr<const CatalogSnapshot> snapshot_;  // guarded by mutex_
  // The names of defined (or dropping) counters, for IsProtectedKey without a lock:
  // replaced whole by Install; old sets are kept until destruction so that a reader never
  // sees one freed.
  std::atomic<const NameSet*> protected_names_{nullptr};
  std::vector<std::unique_ptr<const NameSet>> retired_names_;  // guarded by mutex_
};

}  // namespace tally::derived
