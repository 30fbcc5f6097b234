// PostgresSource's streaming loop (see source_session.h for the files of the source).
//
// Stream reads the replication stream from the smallest stored position and applies each
// source transaction with one DerivedCounters::ApplyTransaction at its commit: every
// followed table's changes and its position (the commit's end LSN) in one tally commit, a
// replayed transaction skipped there. Between transactions it checks, on their own
// cadences: a verification hold not reached yet (every ~100 ms: a keepalive is asked for,
// whose position proves the stream delivered everything before it), tables to follow and
// counters to backfill (every second), and the acknowledgement (ack_interval).
//
// Positions. `processed`: every commit up to it is applied (a keepalive between
// transactions moves it too). Each applied position goes to AppliedPosition with the epoch
// that holds it, so Stats::applied_lsn moves as soon as that epoch is durable; when the
// stream has nothing more to send, Settle makes the last epoch durable at once, rather than
// leave it to the next reader or the committer's timer. Acknowledge, every ack_interval,
// stores positions that only move the slot, waits until all is durable and tells the
// server: the slot is never confirmed past what is durable in tally.
//
// An error in the data (a frame that does not decode, a Relation that does not map, a row
// without its old values, a transaction the counters refuse) sets *fatal: the source stops.
// A broken connection is an error without it: the session ends and Run reconnects.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "sources/postgres/source_session.h"

namespace tally::postgres {

using Clock = SourceClock;

Status PostgresSource::Acknowledge(Session& session, uint64_t lsn) {
  // Positions written here only let the slot advance (no change comes with them): they stop
  // at a verification hold rather than wait in it. What lies past it is acknowledged after
  // the Release.
  int64_t target = static_cast<int64_t>(lsn);
  if (const derived::HoldState hold = target_.hold_state(); hold.held && target > hold.position)
    target = std::max<int64_t>(hold.position, 0);
  for (Table& table : session.tables) {
    if (table.position >= target) continue;
    auto applied = ApplyTo(table.source, {}, target);
    if (!applied) return tl::unexpected(applied.error());
    session.pending_epoch = std::max(session.pending_epoch, applied->required_epoch);
    table.position = target;
  }
  if (auto s = MakeDurable(session); !s) return s;
  // Never past what every table has stored: the slot must not move beyond tally's position.
  const Lsn ack =
      std::max(session.acked, std::min<Lsn>(lsn, static_cast<Lsn>(session.MinPosition())));
  session.acked = ack;
  if (auto s = session.stream->SendStatus(session.received, ack, ack, false); !s) return s;
  const uint64_t lag = stats().lag_bytes;
  static thread_local Clock::time_point last_warning{};
  if (lag > options_.lag_warn_bytes && Clock::now() - last_warning > std::chrono::seconds(60)) {
    last_warning = Clock::now();
    spdlog::warn(
        "postgres source: {} bytes of WAL behind the server (over "
        "--source-lag-warn-bytes {}): the slot keeps that WAL on the database's disk",
        lag, options_.lag_warn_bytes);
  }
  return OkStatus();
}

Status PostgresSource::MakeDurable(Session& session) {
  if (session.pending_epoch == 0) return OkStatus();
  if (auto s = target_.WaitDurable(session.pending_epoch); !s) return s;
  session.pending_epoch = 0;
  return OkStatus();
}

Status PostgresSource::Settle(Session& session, Lsn processed) {
  if (auto s = MakeDurable(session); !s) return s;
  std::lock_guard lock(mutex_);
  caught_up_at_ = processed;
  return OkStatus();
}

Status PostgresSource::Stream(Session& session, bool* fatal) {
  ReplicationStream& stream = *session.stream;
  auto fail = [&](std::string message) {
    *fatal = true;
    return InvalidArgument(std::move(message));
  };
  Lsn processed = static_cast<Lsn>(session.MinPosition());  // every commit up to here applied
  bool in_transaction = false;
  int64_t commit_time = 0;         // of the open transaction, Unix microseconds
  int64_t last_commit = 0;         // of the last applied one
  std::deque<std::string> frames;  // the open transaction's: its rows point into them
  Clock::time_point next_ack = Clock::now() + options_.ack_interval;
  Clock::time_point next_lag = Clock::now();
  Clock::time_point next_hold_check = Clock::now();
  Clock::time_point next_pending_check = Clock::now();
  std::vector<Table*> touched;
  std::vector<derived::SourceTransactionPart> parts;  // of the committing transaction
  auto touch = [&](Table* table) {
    if (std::ranges::find(touched, table) == touched.end()) touched.push_back(table);
  };
  // Why a row message about `table` cannot be applied, empty when it can: no Relation yet,
  // or `what` (an UPDATE, a DELETE) without the whole old row.
  auto refusal = [](const Table& table, std::string_view what, bool whole_old_row) {
    if (!table.mapping) return "table " + table.sql_name + ": a row before its Relation";
    if (whole_old_row) return std::string();
    return "table " + table.sql_name + ": " + std::string(what) +
           " arrived without the whole old row (is REPLICA IDENTITY still FULL? fix it with: "
           "ALTER TABLE " +
           table.sql_name + " REPLICA IDENTITY FULL;)";
  };

  for (;;) {
    if (stopping()) return Acknowledge(session, processed);
    if (!in_transaction && Clock::now() >= next_hold_check) {
      // A verification hold not reached yet: it is reached when the stream shows it has
      // delivered everything up to the held position. Ask the server for a keepalive (its
      // position, between transactions, is that proof) rather than wait for its own ~10 s.
      next_hold_check = Clock::now() + std::chrono::milliseconds(100);
      if (const derived::HoldState hold = target_.hold_state(); hold.held && !hold.reached) {
        target_.MarkStreamAt(static_cast<int64_t>(processed));
        if (static_cast<int64_t>(processed) < hold.position) {
          if (auto s = stream.SendStatus(session.received, session.acked, session.acked, true); !s)
            return s;
        }
      }
    }
    if (!in_transaction && Clock::now() >= next_pending_check) {
      next_pending_check = Clock::now() + std::chrono::seconds(1);
      auto followed = FollowNewTables(session, processed);
      if (!followed) return tl::unexpected(followed.error());
      if (*followed) {
        session.reconnect = true;
        return Acknowledge(session, processed);
      }
      if (auto s = BackfillPending(session); !s) return s;
      if (stopping()) return Acknowledge(session, processed);
    }
    if (Clock::now() >= next_ack) {
      if (auto s = Acknowledge(session, processed); !s) return s;
      next_ack = Clock::now() + options_.ack_interval;
    }
    if (Clock::now() >= next_lag) {
      // Every second, whatever the acknowledgements' cadence.
      next_lag = Clock::now() + std::chrono::seconds(1);
      const bool behind = stats().lag_bytes > 0;
      std::lock_guard lock(mutex_);
      stats_.lag_seconds =
          behind && last_commit != 0 ? static_cast<double>(NowMicros() - last_commit) / 1e6 : 0;
    }
    // Something applied is not durable yet: look for more without waiting, and settle it
    // as soon as nothing more has come.
    const bool unsettled = !in_transaction && session.pending_epoch != 0;
    auto next = stream.Next(std::chrono::milliseconds(unsettled ? 0 : 100));
    if (!next) return tl::unexpected(next.error());
    if (!next->has_value()) {
      if (!in_transaction) {
        if (auto s = Settle(session, processed); !s) return s;
      }
      continue;
    }
    frames.push_back(std::move(**next));
    const std::string& raw = frames.back();
    auto frame = DecodeCopyData(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
    if (!frame) return fail(frame.error().message);
    if (const auto* k = std::get_if<PrimaryKeepalive>(&*frame)) {
      frames.pop_back();
      {
        std::lock_guard lock(mutex_);
        stats_.server_wal_end = std::max<uint64_t>(stats_.server_wal_end, k->wal_end);
      }
      // Between transactions the keepalive's position is processed too: the walsender's
      // send position moves past a commit record only once that transaction has been sent
      // whole (or skipped: it touched no published table), so every transaction ending
      // at or before it is behind us. Confirming it lets the slot advance over other
      // tables' WAL, and a shutting-down server waits for exactly that confirmation.
      if (!in_transaction) {
        processed = std::max(processed, k->wal_end);
        target_.MarkStreamAt(static_cast<int64_t>(processed));
        applied_->Add(0, processed);
      }
      if (k->reply_requested) {
        if (auto s = Acknowledge(session, processed); !s) return s;
        next_ack = Clock::now() + options_.ack_interval;
      }
      continue;
    }
    const auto& data = std::get<XLogData>(*frame);
    session.received = std::max(session.received, data.wal_start);
    {
      std::lock_guard lock(mutex_);
      stats_.received_lsn = session.received;
      stats_.server_wal_end = std::max<uint64_t>(stats_.server_wal_end, data.wal_end);
      caught_up_at_ = 0;
    }
    auto message = DecodeMessage(data.payload);
    if (!message) return fail(message.error().message);

    if (const auto* begin = std::get_if<BeginMessage>(&*message)) {
      in_transaction = true;
      commit_time = PgMicrosToUnixMicros(begin->commit_time);
      touched.clear();
      for (Table& t : session.tables) t.changes.clear();
    } else if (const auto* relation = std::get_if<RelationMessage>(&*message)) {
      Table* table = session.ByOid(relation->oid);
      if (table != nullptr) {
        RelationMessage named = *relation;  // named in messages as everywhere else
        named.namespace_name.clear();
        named.name = table->sql_name;
        auto mapping = MapColumns(named, table->schema, derived_.ColumnsRead(table->source));
        if (!mapping) return fail(mapping.error().message);
        table->mapping = std::move(*mapping);
      }
    } else if (const auto* insert = std::get_if<InsertMessage>(&*message)) {
      Table* table = session.ByOid(insert->relation_oid);
      if (table == nullptr) continue;
      if (auto r = refusal(*table, "", true); !r.empty()) return fail(std::move(r));
      derived::SourceRowChange& change = table->changes.emplace_back();
      change.new_row.emplace();
      if (auto s = TupleToRow(*table->mapping, insert->new_tuple, nullptr, &*change.new_row); !s)
        return fail(s.error().message);
      touch(table);
    } else if (const auto* update = std::get_if<UpdateMessage>(&*message)) {
      Table* table = session.ByOid(update->relation_oid);
      if (table == nullptr) continue;
      if (auto r = refusal(*table, "an UPDATE", update->old_kind == OldTupleKind::kFull);
          !r.empty())
        return fail(std::move(r));
      derived::SourceRowChange& change = table->changes.emplace_back();
      change.old_row.emplace();
      change.new_row.emplace();
      if (auto s = TupleToRow(*table->mapping, update->old_tuple, nullptr, &*change.old_row); !s)
        return fail(s.error().message);
      if (auto s =
              TupleToRow(*table->mapping, update->new_tuple, &update->old_tuple, &*change.new_row);
          !s)
        return fail(s.error().message);
      touch(table);
    } else if (const auto* del = std::get_if<DeleteMessage>(&*message)) {
      Table* table = session.ByOid(del->relation_oid);
      if (table == nullptr) continue;
      if (auto r = refusal(*table, "a DELETE", del->old_kind == OldTupleKind::kFull); !r.empty())
        return fail(std::move(r));
      derived::SourceRowChange& change = table->changes.emplace_back();
      change.old_row.emplace();
      if (auto s = TupleToRow(*table->mapping, del->old_tuple, nullptr, &*change.old_row); !s)
        return fail(s.error().message);
      touch(table);
    } else if (const auto* truncate = std::get_if<TruncateMessage>(&*message)) {
      for (uint32_t oid : truncate->relation_oids) {
        Table* table = session.ByOid(oid);
        if (table == nullptr) continue;
        table->changes.emplace_back().truncate = true;
        touch(table);
      }
    } else if (const auto* commit = std::get_if<CommitMessage>(&*message)) {
      const auto end = static_cast<int64_t>(commit->end_lsn);
      uint64_t epoch = 0;  // the transaction's, when it wrote anything
      if (!touched.empty()) {
        // One commit for the whole transaction: every table's changes and position.
        parts.resize(touched.size());
        for (size_t i = 0; i < touched.size(); ++i) {
          parts[i].source = touched[i]->source;
          parts[i].changes = touched[i]->changes;
        }
        const derived::HoldState hold = target_.hold_state();
        const bool held = hold.held && end > hold.position;
        if (held) SetState("held", true);  // ApplyTransaction waits for the Release
        auto applied = target_.ApplyTransaction(parts, end);
        if (held) SetState("streaming", true);
        for (Table* table : touched) table->changes.clear();  // capacity reused
        if (!applied) {
          std::string names;
          for (const Table* table : touched) names += (names.empty() ? "" : ", ") + table->sql_name;
          return fail((touched.size() == 1 ? "table " : "tables ") + names + ": " +
                      applied.error().message);
        }
        epoch = applied->required_epoch;
        session.pending_epoch = std::max(session.pending_epoch, epoch);
        for (Table* table : touched) table->position = std::max(table->position, end);
        last_commit = commit_time;
        std::lock_guard lock(mutex_);
        ++stats_.transactions;
        stats_.rows += applied->applied;
      }
      in_transaction = false;
      processed = std::max(processed, commit->end_lsn);
      target_.MarkStreamAt(static_cast<int64_t>(processed));
      applied_->Add(epoch, processed);
      frames.clear();
      touched.clear();
    }
    if (!in_transaction) frames.clear();
  }
}

}  // namespace tally::postgres
