// PostgresSource's backfills from a snapshot (see source_session.h for the files of the
// source).
//
// Backfill, at a first start (or when the slot is gone or ahead of tally): the slot is
// created again with an exported snapshot (consistent point C); every source is reset, its
// rows are read under that snapshot and applied as inserts, a chunk per commit; C is stored
// as every source's position last, so a backfill cut short starts over.
//
// BackfillCounter, for a counter defined while streaming (pending): a TEMPORARY slot on a
// connection of its own exports a snapshot (C, S); the counter counts the transactions
// after C from then on (DerivedCounters::ActivateCounter, refused when the stream is
// already past C: a new snapshot, at most 5 times); the table's rows under S are applied to
// that counter alone, while the stream waits (its walsender gets a status update between
// chunks); a failure resets the counter, which waits for another try.
//
// Both report their progress in the figures (backfill_rows of backfill_total) and in the
// log every 2 s, and return early, OK, when the source is stopping.
#include <fmt/core.h>
#include <fmt/format.h>
#include <libpq-fe.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <span>

#include "sources/postgres/source_session.h"

namespace tally::postgres {

using Clock = SourceClock;

Status PostgresSource::Backfill(Session& session, bool slot_exists) {
  ReplicationStream& stream = *session.stream;
  SetState("backfilling", true);
  const Clock::time_point began = Clock::now();
  if (slot_exists) {
    auto dropped = session.Sql("SELECT pg_catalog.pg_drop_replication_slot($1)", {options_.slot});
    if (!dropped) {
      return MakeError(ErrorCode::kUnavailable, "dropping replication slot " + options_.slot +
                                                    " to count again: " + dropped.error().message);
    }
  }
  for (Table& table : session.tables) {
    if (auto s = target_.ResetSource(table.source); !s) return s;
    table.position = 0;
  }
  auto created = stream.CreateSlot(options_.slot);
  if (!created) return tl::unexpected(created.error());
  spdlog::info("postgres source: backfill of {} from the snapshot of slot {} at {}",
               fmt::format("{}", fmt::join(sources_, ", ")), options_.slot,
               FormatLsn(created->consistent_point));
  if (auto s = BeginSnapshotTransaction(session.sql.get(), created->snapshot, Deadline::Never());
      !s) {
    return s;
  }
  // Every table's row count first (in the same snapshot), so progress is over all of them.
  std::vector<uint64_t> totals;
  uint64_t total = 0;
  for (Table& table : session.tables) {
    auto count = session.CountRows(table);
    if (!count) return tl::unexpected(count.error());
    totals.push_back(*count);
    total += totals.back();
  }
  {
    std::lock_guard lock(mutex_);
    stats_.backfilling = true;
    stats_.backfill_rows = 0;
    stats_.backfill_total = total;
  }
  spdlog::info("postgres source: backfill: {} rows to read", total);
  auto percent = [&](uint64_t done) {
    return total == 0
               ? 100.0
               : std::min(100.0, 100.0 * static_cast<double>(done) / static_cast<double>(total));
  };
  uint64_t total_rows = 0;  // read so far, every table
  Clock::time_point last_log = Clock::now();
  for (size_t t = 0; t < session.tables.size(); ++t) {
    Table& table = session.tables[t];
    uint64_t done = 0;  // of this table
    auto read =
        ReadRows(session, table, [&](std::span<const derived::SourceRowChange> chunk) -> Status {
          auto applied = ApplyTo(table.source, chunk, 0);
          if (!applied) return tl::unexpected(applied.error());
          session.pending_epoch = std::max(session.pending_epoch, applied->required_epoch);
          done += chunk.size();
          {
            std::lock_guard lock(mutex_);
            stats_.backfill_rows = total_rows + done;
          }
          if (Clock::now() - last_log >= std::chrono::seconds(2)) {
            last_log = Clock::now();
            spdlog::info("postgres source: backfill: {} of {} rows ({:.1f}%); {}: {} of {}",
                         total_rows + done, total, percent(total_rows + done), table.source, done,
                         totals[t]);
          }
          return OkStatus();
        });
    if (!read) return read;
    if (stopping()) return OkStatus();  // the position stays 0: the next start begins again
    total_rows += done;
    spdlog::info("postgres source: backfill of {}: {} rows ({:.1f}% of all)", table.source, done,
                 percent(total_rows));
  }
  if (auto r = session.Sql("COMMIT"); !r) return tl::unexpected(r.error());
  // The position last: until it is stored, a restart counts again from a new snapshot.
  const auto consistent = static_cast<int64_t>(created->consistent_point);
  for (Table& table : session.tables) {
    auto applied = ApplyTo(table.source, {}, consistent);
    if (!applied) return tl::unexpected(applied.error());
    session.pending_epoch = std::max(session.pending_epoch, applied->required_epoch);
    table.position = consistent;
  }
  if (auto s = MakeDurable(session); !s) return s;
  applied_->Add(0, created->consistent_point);
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  {
    std::lock_guard lock(mutex_);
    stats_.backfilling = false;
  }
  spdlog::info("postgres source: backfill done: {} rows in {:.1f} s; streaming continues from {}",
               total_rows, seconds, FormatLsn(created->consistent_point));
  return OkStatus();
}

Status PostgresSource::ReadRows(
    Session& session, const Table& table,
    const std::function<Status(std::span<const derived::SourceRowChange>)>& apply) {
  // Columns no counter reads are selected as NULL: they may be gone from the table.
  const std::vector<bool> read = derived_.ColumnsRead(table.source);
  std::string columns;
  for (size_t i = 0; i < table.schema.columns.size(); ++i) {
    const auto& c = table.schema.columns[i];
    auto quoted = QuoteIdentifier(session.sql.get(), c.name);
    if (!quoted) return tl::unexpected(quoted.error());
    const bool is_read = i < read.size() && read[i];
    columns += (columns.empty() ? "" : ", ") + (is_read ? "" : std::string("NULL AS ")) + *quoted;
  }
  if (auto r = session.Sql("DECLARE tally_backfill NO SCROLL CURSOR FOR SELECT " + columns +
                               " FROM " + table.sql_name,
                           {}, "reading table " + table.sql_name);
      !r) {
    return tl::unexpected(r.error());
  }
  const std::string fetch =
      "FETCH " + std::to_string(options_.backfill_chunk_rows) + " FROM tally_backfill";
  std::vector<derived::SourceRowChange> chunk;
  Tuple tuple;
  for (;;) {
    if (stopping()) return OkStatus();
    auto rows = session.Sql(fetch);
    if (!rows) return tl::unexpected(rows.error());
    const PGresult* res = rows->get();
    const int n = PQntuples(res);
    if (n == 0) break;
    RelationMessage relation;
    relation.oid = table.oid;
    relation.name = table.sql_name;
    for (int j = 0; j < PQnfields(res); ++j)
      relation.columns.push_back({false, PQfname(res, j), PQftype(res, j), PQfmod(res, j)});
    auto mapping = MapColumns(relation, table.schema, read);
    if (!mapping) return tl::unexpected(mapping.error());
    chunk.resize(static_cast<size_t>(n));
    tuple.cells.resize(static_cast<size_t>(PQnfields(res)));
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < PQnfields(res); ++j) {
        TupleCell& cell = tuple.cells[static_cast<size_t>(j)];
        if (PQgetisnull(res, i, j)) {
          cell = {TupleCell::Kind::kNull, {}};
        } else {
          cell = {
              TupleCell::Kind::kText,
              std::string_view(PQgetvalue(res, i, j), static_cast<size_t>(PQgetlength(res, i, j)))};
        }
      }
      derived::SourceRowChange& change = chunk[static_cast<size_t>(i)];
      change.old_row.reset();
      change.truncate = false;
      change.new_row.emplace();
      if (auto s = TupleToRow(*mapping, tuple, nullptr, &*change.new_row); !s) return s;
    }
    if (auto s = apply(chunk); !s) return s;
  }
  if (auto r = session.Sql("CLOSE tally_backfill"); !r) return tl::unexpected(r.error());
  return OkStatus();
}

Status PostgresSource::BackfillPending(Session& session) {
  for (const Table& table : session.tables) {
    for (const std::string& counter : derived_.PendingCounters(table.source)) {
      if (stopping()) return OkStatus();
      if (auto s = BackfillCounter(session, table, counter); !s) return s;
    }
  }
  return OkStatus();
}

Status PostgresSource::BackfillCounter(Session& session, const Table& table,
                                       const std::string& counter) {
  const Clock::time_point began = Clock::now();
  SetState("backfilling", true);
  constexpr int kMostAttempts = 5;
  Lsn consistent = 0;
  std::unique_ptr<ReplicationStream> repl;
  std::string snapshot;
  for (int attempt = 1;; ++attempt) {
    // The slot lives as long as this connection: it only exports the snapshot.
    repl = std::make_unique<ReplicationStream>();
    if (auto s = repl->Open(session_conninfo_); !s) {
      return MakeError(ErrorCode::kUnavailable,
                       "backfill of counter " + counter + ": " + s.error().message);
    }
    const std::string slot =
        fmt::format("tally_backfill_{}_{:x}_{}", ::getpid(), NowMicros() & 0xffffff, attempt);
    auto created = repl->CreateSlot(slot, ReplicationStream::SlotLifetime::kTemporary);
    if (!created) {
      return MakeError(ErrorCode::kUnavailable,
                       "backfill of counter " + counter + ": " + created.error().message);
    }
    consistent = created->consistent_point;
    snapshot = created->snapshot;
    auto activated = target_.ActivateCounter(counter, static_cast<int64_t>(consistent));
    if (!activated) return tl::unexpected(activated.error());
    if (*activated) break;
    // The stream already applied a transaction past C without this counter.
    spdlog::info(
        "postgres source: backfill of counter {}: the stream is past the snapshot's "
        "{}; again with a new one",
        counter, FormatLsn(consistent));
    if (auto s = target_.ResetCounter(counter); !s) return s;
    if (attempt == kMostAttempts) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("backfill of counter {}: the stream passed {} snapshots "
                                   "before they were taken; trying again later",
                                   counter, kMostAttempts));
    }
  }
  spdlog::info("postgres source: backfill of counter {} (table {}) from the snapshot at {}",
               counter, table.sql_name, FormatLsn(consistent));
  // From here on a failure leaves the counter partial: its groups go and it waits again.
  auto undo = [&](Error error) -> Status {
    {
      std::lock_guard lock(mutex_);
      stats_.backfilling = false;
    }
    session.Sql("ROLLBACK");
    if (auto s = target_.ResetCounter(counter); !s) {
      spdlog::error("postgres source: resetting counter {}: {}", counter, s.error().message);
    }
    return tl::unexpected(
        Error{error.code, "backfill of counter " + counter + ": " + error.message});
  };
  if (auto s = BeginSnapshotTransaction(session.sql.get(), snapshot, Deadline::Never()); !s)
    return undo(s.error());
  repl.reset();  // imported: the temporary slot may go with its connection
  uint64_t total = 0;
  {
    auto count = session.CountRows(table);
    if (!count) return undo(count.error());
    total = *count;
  }
  {
    std::lock_guard lock(mutex_);
    stats_.backfilling = true;
    stats_.backfill_rows = 0;
    stats_.backfill_total = total;
  }
  uint64_t done = 0;
  uint64_t epoch = 0;
  Clock::time_point last_log = Clock::now();
  auto read =
      ReadRows(session, table, [&](std::span<const derived::SourceRowChange> chunk) -> Status {
        auto applied = target_.ApplyBackfill(counter, chunk);
        if (!applied) return tl::unexpected(applied.error());
        epoch = std::max(epoch, applied->required_epoch);
        done += chunk.size();
        {
          std::lock_guard lock(mutex_);
          stats_.backfill_rows = done;
        }
        // The stream waits: keep its walsender from timing out.
        if (session.stream->is_streaming()) {
          if (auto s =
                  session.stream->SendStatus(session.received, session.acked, session.acked, false);
              !s)
            return s;
        }
        if (Clock::now() - last_log >= std::chrono::seconds(2)) {
          last_log = Clock::now();
          spdlog::info("postgres source: backfill of counter {}: {} of {} rows ({:.1f}%)", counter,
                       done, total,
                       total == 0 ? 100.0
                                  : std::min(100.0, 100.0 * static_cast<double>(done) /
                                                        static_cast<double>(total)));
        }
        return OkStatus();
      });
  if (!read) return undo(read.error());
  if (stopping()) {
    session.Sql("ROLLBACK");
    return OkStatus();  // the marker stays: the next start does it again
  }
  if (auto r = session.Sql("COMMIT"); !r) return undo(r.error());
  if (auto s = target_.WaitDurable(epoch); !s) return undo(s.error());
  if (auto s = target_.FinishBackfill(counter); !s) return undo(s.error());
  {
    std::lock_guard lock(mutex_);
    stats_.backfilling = false;
  }
  SetState("streaming", true);
  spdlog::info(
      "postgres source: backfill of counter {} done: {} rows in {:.1f} s; it counts "
      "the transactions after {}",
      counter, done, std::chrono::duration<double>(Clock::now() - began).count(),
      FormatLsn(consistent));
  return OkStatus();
}

}  // namespace tally::postgres
