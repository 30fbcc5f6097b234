// PostgresSource: keeps the derived counters of a PostgreSQL database's tables from its own
// change stream (logical replication, pgoutput), exactly once across crashes and restarts.
// Its writes go to a SourceTarget (source_target.h): the node's own derived counters, or on a
// cluster's consumer node the cluster's change stream (cluster/source_target.h); what follows
// names the single node's DerivedCounters calls, which the cluster's target mirrors.
//
// Which tables. Every tally source (CREATE SOURCE) read by at least one counter is a
// PostgreSQL table of the same name, resolved as an SQL name on the server (search_path,
// case folding). Each needs REPLICA IDENTITY FULL (the formula needs every old row).
//
// Life of a source, on its own thread:
//   1. Start() (the caller's thread): connects, checks the tables (REPLICA IDENTITY FULL,
//      the source's columns present with fitting types) and ensures the publication.
//      What trying again cannot fix is returned: tallyd refuses to start (a bad connection
//      string, failed authentication, a missing role, database or table, a missing
//      privilege, no REPLICA IDENTITY FULL, a column that does not fit). PostgreSQL not
//      there yet (the connection refused, no socket, the server starting up or shutting
//      down, too many connections, a network error or timeout: an error of kind
//      kUnavailable, see pg_client.h) is not an error: the thread starts in state
//      `reconnecting` and connects as in 4, so tallyd serves what is stored meanwhile.
//   2. Backfill, when a table has no stored position (never streamed, or a backfill that did
//      not finish), or the slot is missing or ahead of tally: the slot is dropped and
//      created again with an exported snapshot (consistent point C); every source is reset
//      and its rows are read under that snapshot and applied as inserts, in chunks; then C
//      is stored as every source's position. The slot holds every change after C.
//   3. Streaming from the smallest stored position. Each source transaction is applied
//      atomically with its commit's end LSN as the source's position
//      (DerivedCounters::ApplyTransaction); a replayed transaction is skipped there.
//      PostgreSQL is told (flush = applied) only positions whose commit is durable in tally.
//   3b. A counter defined while streaming (CREATE COUNTER on a streamed source) starts
//      *pending*: no change moves it. Between two transactions, about every second, the
//      thread backfills each pending counter: a TEMPORARY slot with an exported snapshot
//      on a separate replication connection gives (C, S); DerivedCounters::ActivateCounter
//      makes the counter count the transactions above C from then on (refused when the
//      stored position is already past C: a new snapshot, at most 5 times); S is imported
//      on the SQL connection and the table's rows are applied to that counter alone; then
//      FinishBackfill. The stream waits meanwhile (its walsender gets a status update
//      between chunks) and resumes where it was: transactions at or below C skip the new
//      counter, those above count. A crash mid-way: the counter's groups are deleted at
//      start and the backfill is done again.
//   4. A broken connection or a restarted server: reconnect with backoff (100 ms doubling
//      to 5 s) and resume from the stored positions. Every failure to reconnect is retried,
//      a refusal that needs fixing too (logged as an error): once fixed, the source goes on
//      without a restart. An error in the data (a column a counter needs dropped or
//      retyped, a value that does not parse, an overflow, an old row missing) stops this
//      source: nothing more is applied, what was counted stays.
//
// The applied position (Stats::applied_lsn) is the position up to which every change is
// durable in tally. It moves as soon as the commit holding a transaction is durable
// (AppliedPosition, fed by the committer's durable listener), and when the stream is idle
// this thread makes the last transaction durable at once; PostgreSQL is told (the slot's
// confirmed position) at the ack_interval cadence, which may trail.
//
// One transaction touching several source tables is applied with one ApplyTransaction:
// every table's changes (in the order the tables first appear in it) and every table's
// position land in one commit, so a reader (and a crash) sees all of the transaction or
// none of it.
//
// Verification holds (DerivedCounters::Hold, used by tally verify). A held source
// transaction waits inside ApplyTransaction, so this thread waits with it. While a hold is
// not yet reached, the stream makes its progress visible: between transactions a status
// update asks the server for a keepalive every ~100 ms, and the position of each keepalive
// received between transactions, and each applied commit's end LSN, is reported with
// MarkStreamAt. Positions written only to advance the slot (no change) never pass a hold.
// A hold longer than the server's wal_sender_timeout gets the connection cut; the usual
// reconnect resumes after it. Stop() releases any hold first (tallyd is shutting down; a
// verification still running then fails on its own connection).
//
// Thread-safety: Start and Stop from one thread; stats() and Report() from any. The
// constructor adds a durable listener to the engine's committer, which stays (harmless)
// after this object is gone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/status_report.h"
#include "engine/derived/derived_counters.h"
#include "engine/engine.h"
#include "sources/postgres/applied_position.h"
#include "sources/postgres/pgoutput.h"  // Lsn
#include "sources/postgres/source_target.h"

namespace tally::postgres {

class ReplicationStream;

struct PostgresSourceOptions {
  std::string conninfo;                  // libpq connection string (URI or key=value)
  std::string slot = "tally";            // logical replication slot, created when missing
  std::string publication = "tally";     // created when missing; tables are added, never removed
  uint64_t lag_warn_bytes = 1ull << 30;  // warn when the stream is this far behind
  size_t backfill_chunk_rows = 5000;     // rows per applied backfill chunk
  std::chrono::milliseconds ack_interval{1000};    // standby status update period
  std::chrono::milliseconds backoff_initial{100};  // first reconnect delay
  std::chrono::milliseconds backoff_max{5000};     // reconnect delays double up to this
};

class PostgresSource {
 public:
  // What INFO and the HTTP status show.
  struct Stats {
    // starting, backfilling, streaming, held (a transaction waits for a verification hold),
    // reconnecting, failed, stopped
    std::string state = "stopped";
    bool connected = false;
    std::string error;            // the last error (the fatal one when failed)
    uint64_t received_lsn = 0;    // start of the last XLogData received
    uint64_t applied_lsn = 0;     // every change up to here is durable in tally
    uint64_t server_wal_end = 0;  // the server's WAL end, from its frames
    uint64_t lag_bytes = 0;       // server_wal_end - applied_lsn; 0 when caught up
    double lag_seconds = 0;       // now - commit time of the last applied transaction, when behind
    uint64_t transactions = 0;    // source transactions applied
    uint64_t rows = 0;            // row changes applied (backfill rows not included)
    uint64_t reconnects = 0;
    uint64_t backfill_rows = 0;   // rows read by the current (or last) backfill, all tables
    uint64_t backfill_total = 0;  // rows to read, by count(*) of each table in the same snapshot
    bool backfilling = false;
  };

  // stats() and the verification hold as named figures, in this order: state, connected,
  // received_lsn, applied_lsn (LSNs as PostgreSQL writes them, "0/16B3748"), lag_bytes,
  // lag_seconds, transactions, rows, reconnects, backfilling, backfill_rows,
  // backfill_total, backfill_percent, hold ("none" or the held LSN), hold_reached, error.
  StatusReport Report() const;

  // `engine` and `derived` must outlive this object, as `target` when given: where the
  // source's writes go (source_target.h); by default the node's own derived counters.
  PostgresSource(engine::Engine& engine, derived::DerivedCounters& derived,
                 PostgresSourceOptions options, SourceTarget* target = nullptr);
  ~PostgresSource();  // Stop()
  PostgresSource(const PostgresSource&) = delete;
  PostgresSource& operator=(const PostgresSource&) = delete;

  // Connects and checks everything that can be refused (see above), then starts the
  // thread; when PostgreSQL cannot be reached yet, starts the thread reconnecting. An error
  // says what is wrong, ready to show the user. REQUIRES: not started.
  Status Start();

  // Stops the thread promptly (an unfinished backfill starts over next time) after a last
  // acknowledgement of what is durable. Releases any verification hold first, so a thread
  // waiting in it can stop. Idempotent.
  void Stop();

  Stats stats() const;

 private:
  struct Table;    // a source table: its name, oid, schema, stored position
  struct Session;  // one connection: replication stream, SQL connection, tables

  // Connects (replication + SQL), checks the tables and ensures the publication.
  // kUnavailable when trying again later may succeed.
  Status Connect(std::unique_ptr<Session>* session);
  // The thread: sessions one after the other, until Stop. A null `session`: Start could not
  // connect (and said why); the first attempt waits out the first backoff.
  void Run(std::unique_ptr<Session> session);
  // Waits out `*backoff` (Stop cuts it short), counts a reconnect and doubles `*backoff` up
  // to backoff_max.
  void Pause(std::chrono::milliseconds* backoff);
  // One connection's life: backfill when needed, then stream until an error or Stop.
  // *fatal is set when the error must stop the source rather than reconnect.
  Status RunSession(Session& session, bool* fatal);
  Status Backfill(Session& session, bool slot_exists);
  // Reads `table` (in the transaction open on session.sql) through a cursor, a chunk of
  // rows at a time, as inserts. Returns early, OK, when stopping.
  Status ReadRows(Session& session, const Table& table,
                  const std::function<Status(std::span<const derived::SourceRowChange>)>& apply);
  // The backfill of every counter added while streaming (DerivedCounters::PendingCounters),
  // one at a time, between two source transactions.
  Status BackfillPending(Session& session);
  Status BackfillCounter(Session& session, const Table& table, const std::string& counter);
  // Tables that counters defined since Start read but the session does not follow: each one
  // that can be followed (REPLICA IDENTITY FULL) gets the current position as its own (its
  // counters are all pending: their backfills count what lies before) and joins sources_.
  // True when one joined: the session must reconnect to add it to the publication and the
  // stream. A table that cannot be followed yet is reported and tried again later.
  Result<bool> FollowNewTables(Session& session, uint64_t processed);
  Status Stream(Session& session, bool* fatal);
  // Stores `lsn` as every source's position where it is behind, waits until everything
  // applied is durable and tells the server.
  Status Acknowledge(Session& session, uint64_t lsn);
  // Makes everything applied durable (session.pending_epoch) and reports the stream caught
  // up at `processed`: it had nothing more to send.
  Status Settle(Session& session, Lsn processed);
  // Waits until everything applied (session.pending_epoch) is durable, committing on this
  // thread when nobody else is (what a reader waiting for one of its values would do); the
  // committer's listener then moves the applied position.
  Status MakeDurable(Session& session);
  void SetState(const std::string& state, bool connected);
  void SetError(const std::string& error);
  bool stopping() const;

  // One part of one source: the shape of every write that is not a whole transaction.
  Result<derived::PushOutcome> ApplyTo(std::string_view source,
                                       std::span<const derived::SourceRowChange> changes,
                                       int64_t position);

  engine::Engine& engine_;
  derived::DerivedCounters& derived_;         // the catalog's reads; writes go to target_
  std::unique_ptr<SourceTarget> own_target_;  // the default: LocalSourceTarget
  SourceTarget& target_;
  const PostgresSourceOptions options_;
  std::string session_conninfo_;  // options_.conninfo with DateStyle=ISO, TimeZone=UTC
  // The sources with counters, by name: set by Start, grown by FollowNewTables; the runner
  // thread's alone once started.
  std::vector<std::string> sources_;
  std::string unfollowed_error_;  // FollowNewTables' last refusal, logged once

  // Stats::applied_lsn. Shared with the committer's durable listener, which may outlive this.
  const std::shared_ptr<AppliedPosition> applied_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // Stop() wakes a backoff sleep
  bool stop_ = false;             // guarded by mutex_
  bool finished_ = false;         // the thread has left Run; guarded by mutex_
  Stats stats_;  // guarded by mutex_; applied_lsn and lag_bytes are computed by stats()
  // The stream had nothing more to send once everything up to here was processed: caught
  // up when applied. 0 once it sent more. Guarded by mutex_.
  Lsn caught_up_at_ = 0;
  std::thread thread_;
};

}  // namespace tally::postgres
