#include "sources/postgres/postgres_source.h"

#include <fmt/core.h>
#include <libpq-fe.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <variant>

#include "sources/postgres/pg_client.h"
#include "sources/postgres/pg_types.h"
#include "sources/postgres/pgoutput.h"
#include "sources/postgres/replication_stream.h"

namespace tally::postgres {
namespace {

using Clock = std::chrono::steady_clock;
namespace defs = tally::definitions;

// The connection string with the session settings pgoutput's text values and ours are
// parsed under (pg_types.h): options='-c DateStyle=ISO -c TimeZone=UTC' appended to any
// given, and connect_timeout=10 unless set. A string libpq cannot parse is returned as
// is: ReplicationStream::Open reports it.
std::string WithSessionSettings(const std::string& conninfo) {
  auto params = ParseConnString(conninfo);
  if (!params) return conninfo;
  const std::string settings = "-c DateStyle=ISO -c TimeZone=UTC";
  bool has_options = false;
  for (auto& [key, value] : *params) {
    if (key != "options") continue;
    value += " " + settings;
    has_options = true;
  }
  if (!has_options) params->emplace_back("options", settings);
  if (FindParam(*params, "connect_timeout") == nullptr) {
    params->emplace_back("connect_timeout", "10");
  }
  return FormatConnString(*params);
}

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct PostgresSource::Table {
  std::string source;    // tally's source name = the table's SQL name
  std::string sql_name;  // as the server prints it (quoted, qualified where needed)
  uint32_t oid = 0;
  defs::SourceSchema schema;
  std::optional<ColumnMapping> mapping;  // from the session's last Relation message
  int64_t position = 0;                  // stored position (as far as this thread wrote it)
  std::vector<derived::SourceRowChange> changes;  // of the open transaction
};

struct PostgresSource::Session {
  std::unique_ptr<ReplicationStream> stream;
  PgConn sql;  // catalog queries and the backfills' snapshot transactions
  std::vector<Table> tables;
  uint64_t pending_epoch = 0;  // the newest epoch applied and not yet known durable
  Lsn received = 0;
  Lsn acked = 0;           // the last position sent as flushed
  bool reconnect = false;  // the session ended to follow a new table: reconnect at once

  // Runs one command on `sql`, waiting as long as it takes (a FETCH of a large table may).
  // Its errors name `what`, or the command itself.
  Result<PgResult> Sql(const std::string& command, const std::vector<std::string>& params = {},
                       std::string_view what = {}) {
    return Exec(sql.get(), command, params, Deadline::Never(), what.empty() ? command : what);
  }
  // The rows of `table` (in the transaction open on `sql`).
  Result<uint64_t> CountRows(const Table& table) {
    auto count = Sql("SELECT count(*) FROM " + table.sql_name);
    if (!count) return tl::unexpected(count.error());
    return UnsignedValue(count->get(), 0, 0);
  }
  Table* ByOid(uint32_t oid) {
    for (Table& t : tables)
      if (t.oid == oid) return &t;
    return nullptr;
  }
  int64_t MinPosition() const {
    int64_t p = INT64_MAX;
    for (const Table& t : tables) p = std::min(p, t.position);
    return tables.empty() ? 0 : p;
  }
};

PostgresSource::PostgresSource(engine::Engine& engine, derived::DerivedCounters& derived,
                               PostgresSourceOptions options)
    : engine_(engine), derived_(derived), options_(std::move(options)) {
  session_conninfo_ = WithSessionSettings(options_.conninfo);
}

PostgresSource::~PostgresSource() { Stop(); }

bool PostgresSource::stopping() const {
  std::lock_guard lock(mutex_);
  return stop_;
}

void PostgresSource::SetState(const std::string& state, bool connected) {
  std::lock_guard lock(mutex_);
  stats_.state = state;
  stats_.connected = connected;
}

void PostgresSource::SetError(const std::string& error) {
  std::lock_guard lock(mutex_);
  stats_.error = error;
}

PostgresSource::Stats PostgresSource::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

Status PostgresSource::Start() {
  for (const derived::CounterListing& counter : derived_.Counters()) {
    if (std::ranges::find(sources_, counter.source) == sources_.end())
      sources_.push_back(counter.source);
  }
  std::ranges::sort(sources_);
  if (sources_.empty()) {
    return InvalidArgument(
        "--source: no counter is defined, so there is no table to follow (give --definitions "
        "with CREATE SOURCE and CREATE COUNTER statements)");
  }
  // From now on a counter defined on a source — these, or a table not followed yet — is
  // backfilled from a snapshot.
  derived_.MarkEverySourceStreamed();
  SetState("starting", false);
  std::unique_ptr<Session> session;
  if (auto s = Connect(&session); !s) return s;
  thread_ = std::thread([this, s = std::move(session)]() mutable {
    Run(std::move(s));
    std::lock_guard lock(mutex_);
    finished_ = true;
    wake_.notify_all();
  });
  return OkStatus();
}

void PostgresSource::Stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (!thread_.joinable()) return;
  // The thread may wait in ApplyTransaction for a verification hold: let it go (it applies
  // that one transaction, then sees stop_), again if a new hold catches it before it ends.
  std::unique_lock lock(mutex_);
  while (!finished_) {
    lock.unlock();
    derived_.Release();
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return finished_; });
  }
  lock.unlock();
  thread_.join();
}

StatusReport PostgresSource::Report() const {
  const Stats s = stats();
  const derived::HoldState hold = derived_.hold_state();
  const double percent = s.backfill_total == 0
                             ? 100.0
                             : std::min(100.0, 100.0 * static_cast<double>(s.backfill_rows) /
                                                   static_cast<double>(s.backfill_total));
  StatusReport report;
  report.push_back({"state", s.state});
  report.push_back({"connected", s.connected});
  report.push_back({"received_lsn", FormatLsn(s.received_lsn)});
  report.push_back({"applied_lsn", FormatLsn(s.applied_lsn)});
  report.push_back({"lag_bytes", s.lag_bytes});
  report.push_back({"lag_seconds", s.lag_seconds});
  report.push_back({"transactions", s.transactions});
  report.push_back({"rows", s.rows});
  report.push_back({"reconnects", s.reconnects});
  report.push_back({"backfilling", s.backfilling});
  report.push_back({"backfill_rows", s.backfill_rows});
  report.push_back({"backfill_total", s.backfill_total});
  report.push_back({"backfill_percent", std::floor(percent * 10) / 10});
  report.push_back({"hold", hold.held
                                ? FormatLsn(static_cast<Lsn>(std::max<int64_t>(hold.position, 0)))
                                : std::string("none")});
  report.push_back({"hold_reached", hold.held && hold.reached});
  report.push_back({"error", s.error});
  return report;
}

Status PostgresSource::Connect(std::unique_ptr<Session>* out) {
  auto session = std::make_unique<Session>();
  session->stream = std::make_unique<ReplicationStream>();
  ReplicationStream& stream = *session->stream;
  if (auto s = stream.Open(session_conninfo_); !s) return s;
  auto id = stream.IdentifySystem();
  if (!id) return tl::unexpected(id.error());
  if (auto s = stream.CheckReplicaIdentityFull(sources_); !s) return s;
  auto change = stream.EnsurePublication(options_.publication, sources_);
  if (!change) return tl::unexpected(change.error());
  if (!change->added.empty()) {
    std::string added;
    for (const std::string& t : change->added) added += (added.empty() ? "" : ", ") + t;
    spdlog::info("postgres source: publication {} {}: {}", options_.publication,
                 change->created ? "created" : "extended", added);
  }

  auto params = ParseConnString(session_conninfo_);
  if (!params) return InvalidArgument("invalid connection string: " + params.error().message);
  ConnectOptions connect;
  connect.application_name = "tally";
  auto sql = postgres::Connect(*params, connect);
  if (!sql) return MakeError(ErrorCode::kUnavailable, sql.error().Describe("cannot connect"));
  session->sql = std::move(*sql);
  for (const std::string& name : sources_) {
    Table table;
    table.source = name;
    auto schema = derived_.SourceSchemaOf(name);
    if (!schema) return MakeError(ErrorCode::kNotFound, "source " + name + " does not exist");
    table.schema = *schema;
    auto found = session->Sql(
        "SELECT c.oid::text, c.oid::regclass::text FROM pg_catalog.pg_class c "
        "WHERE c.oid = pg_catalog.to_regclass($1)",
        {name}, "looking up table " + name);
    if (!found) return tl::unexpected(found.error());
    if (PQntuples(found->get()) != 1)
      return MakeError(ErrorCode::kNotFound, "table \"" + name + "\" does not exist");
    auto oid = UnsignedValue(found->get(), 0, 0, UINT32_MAX);
    if (!oid) return tl::unexpected(oid.error());
    table.oid = static_cast<uint32_t>(*oid);
    table.sql_name = Text(found->get(), 0, 1);
    // The table's columns must feed the source's (the same check as each Relation message).
    auto columns = session->Sql(
        "SELECT attname::text, atttypid::oid::text FROM pg_catalog.pg_attribute "
        "WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        {std::to_string(table.oid)}, "listing the columns of table " + table.sql_name);
    if (!columns) return tl::unexpected(columns.error());
    RelationMessage relation;
    relation.oid = table.oid;
    relation.name = table.sql_name;
    for (int i = 0; i < PQntuples(columns->get()); ++i) {
      auto type = UnsignedValue(columns->get(), i, 1, UINT32_MAX);
      if (!type) return tl::unexpected(type.error());
      relation.columns.push_back(
          {false, Text(columns->get(), i, 0), static_cast<uint32_t>(*type), -1});
    }
    if (auto mapping = MapColumns(relation, table.schema, derived_.ColumnsRead(name)); !mapping)
      return tl::unexpected(mapping.error());
    table.position = derived_.SourcePosition(name);
    session->tables.push_back(std::move(table));
  }
  {
    std::lock_guard lock(mutex_);
    stats_.error.clear();
  }
  spdlog::info("postgres source: connected ({}), system {}, WAL at {}; tables {}", stream.target(),
               id->system_id, FormatLsn(id->xlogpos), fmt::format("{}", fmt::join(sources_, ", ")));
  *out = std::move(session);
  return OkStatus();
}

void PostgresSource::Run(std::unique_ptr<Session> session) {
  auto backoff = options_.backoff_initial;
  while (!stopping()) {
    if (session == nullptr) {
      SetState("reconnecting", false);
      if (auto s = Connect(&session); !s) {
        session.reset();
        SetError(s.error().message);
        spdlog::warn("postgres source: {}; retrying in {} ms", s.error().message, backoff.count());
        std::unique_lock lock(mutex_);
        ++stats_.reconnects;
        wake_.wait_for(lock, backoff, [this] { return stop_; });
        backoff = std::min(backoff * 2, options_.backoff_max);
        continue;
      }
    }
    bool fatal = false;
    const uint64_t transactions_before = stats().transactions;
    auto status = RunSession(*session, &fatal);
    const bool progressed = stats().transactions != transactions_before;
    const bool reconnect = status && session->reconnect;
    session.reset();
    if (stopping()) break;
    if (reconnect) continue;
    const std::string message = status ? std::string("the stream ended") : status.error().message;
    SetError(message);
    if (fatal) {
      SetState("failed", false);
      spdlog::error(
          "postgres source stopped: {}. Nothing more is applied; the counters keep "
          "what was counted before. Fix the cause and restart tallyd.",
          message);
      return;
    }
    if (progressed) backoff = options_.backoff_initial;
    spdlog::warn("postgres source: {}; reconnecting in {} ms", message, backoff.count());
    std::unique_lock lock(mutex_);
    stats_.connected = false;
    stats_.state = "reconnecting";
    ++stats_.reconnects;
    wake_.wait_for(lock, backoff, [this] { return stop_; });
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
  SetState("stopped", false);
}

Status PostgresSource::RunSession(Session& session, bool* fatal) {
  ReplicationStream& stream = *session.stream;
  bool backfill =
      std::ranges::any_of(session.tables, [](const Table& t) { return t.position == 0; });
  auto slot = stream.FindSlot(options_.slot);
  if (!slot) return tl::unexpected(slot.error());
  if (slot->has_value()) {
    const SlotState& state = **slot;
    if (state.slot_type != "logical" || state.plugin != "pgoutput") {
      *fatal = true;
      return InvalidArgument(fmt::format(
          "replication slot {} is not a logical pgoutput slot ({} {}): choose another with "
          "--source-slot",
          options_.slot, state.slot_type, state.plugin));
    }
    if (!backfill && state.confirmed_flush &&
        static_cast<int64_t>(*state.confirmed_flush) > session.MinPosition()) {
      spdlog::warn(
          "postgres source: slot {} is at {}, past tally's position {}: changes in "
          "between are gone; counting again from a snapshot",
          options_.slot, FormatLsn(*state.confirmed_flush),
          FormatLsn(static_cast<Lsn>(session.MinPosition())));
      backfill = true;
    }
  } else if (!backfill) {
    spdlog::warn(
        "postgres source: slot {} does not exist (dropped?): counting again from a "
        "snapshot",
        options_.slot);
    backfill = true;
  }
  if (backfill) {
    if (auto s = Backfill(session, slot->has_value()); !s) return s;
    if (stopping()) return OkStatus();
  }
  const Lsn start = static_cast<Lsn>(session.MinPosition());
  if (auto s = stream.Start(options_.slot, start, options_.publication); !s) return s;
  session.acked = start;
  spdlog::info("postgres source: streaming from {} (slot {}, publication {})", FormatLsn(start),
               options_.slot, options_.publication);
  {
    std::lock_guard lock(mutex_);
    stats_.state = "streaming";
    stats_.connected = true;
    stats_.applied_lsn = std::max<uint64_t>(stats_.applied_lsn, start);
  }
  return Stream(session, fatal);
}

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
    if (auto s = derived_.ResetSource(table.source); !s) return s;
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
          auto applied = derived_.ApplyTransaction(table.source, chunk, 0);
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
    auto applied = derived_.ApplyTransaction(table.source, {}, consistent);
    if (!applied) return tl::unexpected(applied.error());
    session.pending_epoch = std::max(session.pending_epoch, applied->required_epoch);
    table.position = consistent;
  }
  engine_.committer().WaitDurable(session.pending_epoch);
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  {
    std::lock_guard lock(mutex_);
    stats_.backfilling = false;
    stats_.applied_lsn = created->consistent_point;
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

Result<bool> PostgresSource::FollowNewTables(Session& session, uint64_t processed) {
  std::vector<std::string> joined;
  for (const derived::CounterListing& counter : derived_.Counters()) {
    const std::string& source = counter.source;
    if (std::ranges::find(sources_, source) != sources_.end() ||
        std::ranges::find(joined, source) != joined.end())
      continue;
    if (auto s = session.stream->CheckReplicaIdentityFull({source}); !s) {
      const std::string message = "counter " + counter.name + " waits: " + s.error().message;
      if (message != unfollowed_error_) {
        unfollowed_error_ = message;
        spdlog::error("postgres source: {}", message);
        SetError(message);
      }
      continue;
    }
    // Every counter of a table not followed yet is pending (MarkEverySourceStreamed), so the
    // table's position may start here: each counter's backfill counts what lies before.
    auto applied = derived_.ApplyTransaction(source, {}, static_cast<int64_t>(processed));
    if (!applied) return tl::unexpected(applied.error());
    session.pending_epoch = std::max(session.pending_epoch, applied->required_epoch);
    joined.push_back(source);
  }
  if (joined.empty()) return false;
  unfollowed_error_.clear();
  sources_.insert(sources_.end(), joined.begin(), joined.end());
  std::ranges::sort(sources_);
  spdlog::info("postgres source: following {} too; reconnecting to add it to publication {}",
               fmt::format("{}", fmt::join(joined, ", ")), options_.publication);
  return true;
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
    auto activated = derived_.ActivateCounter(counter, static_cast<int64_t>(consistent));
    if (!activated) return tl::unexpected(activated.error());
    if (*activated) break;
    // The stream already applied a transaction past C without this counter.
    spdlog::info(
        "postgres source: backfill of counter {}: the stream is past the snapshot's "
        "{}; again with a new one",
        counter, FormatLsn(consistent));
    if (auto s = derived_.ResetCounter(counter); !s) return s;
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
    if (auto s = derived_.ResetCounter(counter); !s) {
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
        auto applied = derived_.ApplyBackfill(counter, chunk);
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
  if (epoch != 0) engine_.committer().WaitDurable(epoch);
  if (auto s = derived_.FinishBackfill(counter); !s) return undo(s.error());
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

Status PostgresSource::Acknowledge(Session& session, uint64_t lsn) {
  // Positions written here only let the slot advance (no change comes with them): they stop
  // at a verification hold rather than wait in it. What lies past it is acknowledged after
  // the Release.
  int64_t target = static_cast<int64_t>(lsn);
  if (const derived::HoldState hold = derived_.hold_state(); hold.held && target > hold.position)
    target = std::max<int64_t>(hold.position, 0);
  for (Table& table : session.tables) {
    if (table.position >= target) continue;
    auto applied = derived_.ApplyTransaction(table.source, {}, target);
    if (!applied) return tl::unexpected(applied.error());
    session.pending_epoch = std::max(session.pending_epoch, applied->required_epoch);
    table.position = target;
  }
  if (session.pending_epoch != 0) engine_.committer().WaitDurable(session.pending_epoch);
  session.pending_epoch = 0;
  // Never past what every table has stored: the slot must not move beyond tally's position.
  const Lsn ack =
      std::max(session.acked, std::min<Lsn>(lsn, static_cast<Lsn>(session.MinPosition())));
  session.acked = ack;
  if (auto s = session.stream->SendStatus(session.received, ack, ack, false); !s) return s;
  uint64_t lag = 0;
  {
    std::lock_guard lock(mutex_);
    stats_.applied_lsn = std::max<uint64_t>(stats_.applied_lsn, ack);
    lag = stats_.lag_bytes =
        stats_.server_wal_end > stats_.applied_lsn ? stats_.server_wal_end - stats_.applied_lsn : 0;
  }
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
  Clock::time_point next_hold_check = Clock::now();
  Clock::time_point next_pending_check = Clock::now();
  std::vector<Table*> touched;
  std::vector<derived::SourceTransactionPart> parts;  // of the committing transaction

  for (;;) {
    if (stopping()) return Acknowledge(session, processed);
    if (!in_transaction && Clock::now() >= next_hold_check) {
      // A verification hold not reached yet: it is reached when the stream shows it has
      // delivered everything up to the held position. Ask the server for a keepalive (its
      // position, between transactions, is that proof) rather than wait for its own ~10 s.
      next_hold_check = Clock::now() + std::chrono::milliseconds(100);
      if (const derived::HoldState hold = derived_.hold_state(); hold.held && !hold.reached) {
        derived_.MarkStreamAt(static_cast<int64_t>(processed));
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
      std::lock_guard lock(mutex_);
      stats_.lag_seconds = stats_.lag_bytes > 0 && last_commit != 0
                               ? static_cast<double>(NowMicros() - last_commit) / 1e6
                               : 0;
    }
    auto next = stream.Next(std::chrono::milliseconds(100));
    if (!next) return tl::unexpected(next.error());
    if (!next->has_value()) {
      // Nothing to receive and nothing unacknowledged: caught up, whatever else the
      // server's WAL holds (other tables, other databases).
      if (!in_transaction && session.pending_epoch == 0) {
        std::lock_guard lock(mutex_);
        if (stats_.applied_lsn >= processed) {
          stats_.lag_bytes = 0;
          stats_.lag_seconds = 0;
        }
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
        derived_.MarkStreamAt(static_cast<int64_t>(processed));
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
      if (!table->mapping) return fail("table " + table->sql_name + ": a row before its Relation");
      derived::SourceRowChange& change = table->changes.emplace_back();
      change.new_row.emplace();
      if (auto s = TupleToRow(*table->mapping, insert->new_tuple, nullptr, &*change.new_row); !s)
        return fail(s.error().message);
      if (std::ranges::find(touched, table) == touched.end()) touched.push_back(table);
    } else if (const auto* update = std::get_if<UpdateMessage>(&*message)) {
      Table* table = session.ByOid(update->relation_oid);
      if (table == nullptr) continue;
      if (!table->mapping) return fail("table " + table->sql_name + ": a row before its Relation");
      if (update->old_kind != OldTupleKind::kFull) {
        return fail("table " + table->sql_name +
                    ": an UPDATE arrived without the whole old row (is REPLICA IDENTITY still "
                    "FULL? fix it with: ALTER TABLE " +
                    table->sql_name + " REPLICA IDENTITY FULL;)");
      }
      derived::SourceRowChange& change = table->changes.emplace_back();
      change.old_row.emplace();
      change.new_row.emplace();
      if (auto s = TupleToRow(*table->mapping, update->old_tuple, nullptr, &*change.old_row); !s)
        return fail(s.error().message);
      if (auto s =
              TupleToRow(*table->mapping, update->new_tuple, &update->old_tuple, &*change.new_row);
          !s)
        return fail(s.error().message);
      if (std::ranges::find(touched, table) == touched.end()) touched.push_back(table);
    } else if (const auto* del = std::get_if<DeleteMessage>(&*message)) {
      Table* table = session.ByOid(del->relation_oid);
      if (table == nullptr) continue;
      if (!table->mapping) return fail("table " + table->sql_name + ": a row before its Relation");
      if (del->old_kind != OldTupleKind::kFull) {
        return fail("table " + table->sql_name +
                    ": a DELETE arrived without the whole old row (is REPLICA IDENTITY still "
                    "FULL? fix it with: ALTER TABLE " +
                    table->sql_name + " REPLICA IDENTITY FULL;)");
      }
      derived::SourceRowChange& change = table->changes.emplace_back();
      change.old_row.emplace();
      if (auto s = TupleToRow(*table->mapping, del->old_tuple, nullptr, &*change.old_row); !s)
        return fail(s.error().message);
      if (std::ranges::find(touched, table) == touched.end()) touched.push_back(table);
    } else if (const auto* truncate = std::get_if<TruncateMessage>(&*message)) {
      for (uint32_t oid : truncate->relation_oids) {
        Table* table = session.ByOid(oid);
        if (table == nullptr) continue;
        table->changes.emplace_back().truncate = true;
        if (std::ranges::find(touched, table) == touched.end()) touched.push_back(table);
      }
    } else if (const auto* commit = std::get_if<CommitMessage>(&*message)) {
      const auto end = static_cast<int64_t>(commit->end_lsn);
      if (!touched.empty()) {
        // One commit for the whole transaction: every table's changes and position.
        parts.resize(touched.size());
        for (size_t i = 0; i < touched.size(); ++i) {
          parts[i].source = touched[i]->source;
          parts[i].changes = touched[i]->changes;
        }
        const derived::HoldState hold = derived_.hold_state();
        const bool held = hold.held && end > hold.position;
        if (held) SetState("held", true);  // ApplyTransaction waits for the Release
        auto applied = derived_.ApplyTransaction(parts, end);
        if (held) SetState("streaming", true);
        for (Table* table : touched) table->changes.clear();  // capacity reused
        if (!applied) {
          std::string names;
          for (const Table* table : touched) names += (names.empty() ? "" : ", ") + table->sql_name;
          return fail((touched.size() == 1 ? "table " : "tables ") + names + ": " +
                      applied.error().message);
        }
        session.pending_epoch = std::max(session.pending_epoch, applied->required_epoch);
        for (Table* table : touched) table->position = std::max(table->position, end);
        last_commit = commit_time;
        std::lock_guard lock(mutex_);
        ++stats_.transactions;
        stats_.rows += applied->applied;
      }
      in_transaction = false;
      processed = std::max(processed, commit->end_lsn);
      derived_.MarkStreamAt(static_cast<int64_t>(processed));
      frames.clear();
      touched.clear();
    }
    if (!in_transaction) frames.clear();
  }
}

}  // namespace tally::postgres
