#include "sources/postgres/replication_stream.h"

#include <libpq-fe.h>

#include <utility>

#include "core/integer.h"

namespace tally::postgres {
namespace {

// A slot name as the walsender grammar takes it unquoted, and as PostgreSQL allows.
Status CheckSlotName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 63;
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (!ok) {
    return InvalidArgument("invalid replication slot name \"" + std::string(name) +
                           "\": use 1 to 63 lower-case letters, digits and underscores");
  }
  return OkStatus();
}

Status CheckPublicationName(std::string_view name) {
  if (name.empty() || name.size() > 63) {
    return InvalidArgument("invalid publication name \"" + std::string(name) +
                           "\": use 1 to 63 characters");
  }
  if (name.find('\0') != std::string_view::npos) {
    return InvalidArgument("invalid publication name: it contains a NUL byte");
  }
  return OkStatus();
}

// A table named by the user, resolved by the server (search_path, quoting, case folding).
struct Table {
  std::string oid;
  std::string name;  // regclass text: quoted and schema-qualified only where needed
  char replica_identity = 'd';
};

}  // namespace

ReplicationStream::ReplicationStream(ReplicationOptions options) : options_(std::move(options)) {}

ReplicationStream::~ReplicationStream() { Close(); }

Status ReplicationStream::Open(std::string_view conninfo) {
  if (repl_ != nullptr) return MakeError(ErrorCode::kInternal, "replication stream already open");
  auto params = ParseConnString(conninfo);
  if (!params) return InvalidArgument("invalid connection string: " + params.error().message);
  auto conn = Connect(*params, ConnectOptionsFor(/*replication=*/true));
  if (!conn) return tl::unexpected(conn.error().ToError("cannot open a replication connection"));
  repl_ = std::move(*conn);
  const char* host = PQhost(repl_.get());
  const char* port = PQport(repl_.get());
  target_ = std::string(host != nullptr ? host : "") + ":" + (port != nullptr ? port : "") +
            ", database " + PQdb(repl_.get()) + ", user " + PQuser(repl_.get());
  params_ = std::move(*params);
  return OkStatus();
}

ConnectOptions ReplicationStream::ConnectOptionsFor(bool replication) const {
  ConnectOptions connect;
  connect.replication = replication;
  connect.application_name = options_.application_name;
  connect.timeout = options_.connect_timeout;
  return connect;
}

Status ReplicationStream::EnsureSqlConnection() {
  if (sql_ != nullptr) return OkStatus();
  if (repl_ == nullptr) return MakeError(ErrorCode::kInternal, "replication stream not open");
  auto conn = Connect(params_, ConnectOptionsFor(/*replication=*/false));
  if (!conn) return tl::unexpected(conn.error().ToError("cannot connect"));
  sql_ = std::move(*conn);
  return OkStatus();
}

Result<SystemIdentity> ReplicationStream::IdentifySystem() {
  if (streaming_) return MakeError(ErrorCode::kInternal, "IDENTIFY_SYSTEM while streaming");
  auto r = Exec(repl_.get(), "IDENTIFY_SYSTEM", {}, CommandDeadline(), "IDENTIFY_SYSTEM");
  if (!r) return tl::unexpected(r.error());
  const PGresult* res = r->get();
  if (PQntuples(res) != 1 || PQnfields(res) < 4) {
    return Corruption("IDENTIFY_SYSTEM: unexpected answer shape");
  }
  SystemIdentity id;
  id.system_id = Text(res, 0, 0);
  const std::optional<int64_t> timeline = ParseInt64(Text(res, 0, 1));
  if (!timeline) return Corruption("IDENTIFY_SYSTEM: timeline '" + Text(res, 0, 1) + "'");
  id.timeline = *timeline;
  auto lsn = ParseLsn(Text(res, 0, 2));
  if (!lsn) return tl::unexpected(lsn.error());
  id.xlogpos = *lsn;
  id.dbname = Text(res, 0, 3);
  return id;
}

namespace {

Result<Table> ResolveTable(pg_conn* sql, const std::string& name, const Deadline& deadline) {
  auto r = Exec(sql,
                "SELECT c.oid::text, c.oid::regclass::text, c.relreplident::text "
                "FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1)",
                {name}, deadline, "looking up table " + name);
  if (!r) return tl::unexpected(r.error());
  if (PQntuples(r->get()) != 1) {
    return MakeError(ErrorCode::kNotFound, "table \"" + name + "\" does not exist");
  }
  Table t;
  t.oid = Text(r->get(), 0, 0);
  t.name = Text(r->get(), 0, 1);
  const std::string identity = Text(r->get(), 0, 2);
  t.replica_identity = identity.empty() ? 'd' : identity[0];
  return t;
}

}  // namespace

Status ReplicationStream::CheckReplicaIdentityFull(const std::vector<std::string>& tables) {
  if (auto s = EnsureSqlConnection(); !s) return s;
  for (const std::string& name : tables) {
    auto t = ResolveTable(sql_.get(), name, CommandDeadline());
    if (!t) return tl::unexpected(t.error());
    if (t->replica_identity != 'f') {
      return InvalidArgument("table " + t->name +
                             " does not have REPLICA IDENTITY FULL (tally needs the old row of "
                             "every update and delete); fix it with: ALTER TABLE " +
                             t->name + " REPLICA IDENTITY FULL;");
    }
  }
  return OkStatus();
}

Result<PublicationChange> ReplicationStream::EnsurePublication(
    std::string_view name, const std::vector<std::string>& tables) {
  if (auto s = CheckPublicationName(name); !s) return tl::unexpected(s.error());
  if (tables.empty()) return InvalidArgument("a publication needs at least one table");
  if (auto s = EnsureSqlConnection(); !s) return tl::unexpected(s.error());
  std::vector<Table> resolved;
  for (const std::string& t : tables) {
    auto table = ResolveTable(sql_.get(), t, CommandDeadline());
    if (!table) return tl::unexpected(table.error());
    resolved.push_back(*table);
  }
  const std::string pub(name);
  auto quoted_name = QuoteIdentifier(sql_.get(), pub);
  if (!quoted_name) return InvalidArgument("publication name: " + quoted_name.error().message);
  const std::string& quoted = *quoted_name;

  auto found = Exec(sql_.get(),
                    "SELECT puballtables::text FROM pg_catalog.pg_publication WHERE pubname = $1",
                    {pub}, CommandDeadline(), "looking up publication " + pub);
  if (!found) return tl::unexpected(found.error());
  PublicationChange change;
  auto table_list = [](const std::vector<Table>& list) {
    std::string out;
    for (const Table& t : list) out += (out.empty() ? "" : ", ") + t.name;
    return out;
  };
  if (PQntuples(found->get()) == 0) {
    const std::string sql = "CREATE PUBLICATION " + quoted + " FOR TABLE " + table_list(resolved);
    auto created = Exec(sql_.get(), sql, {}, CommandDeadline(), "CREATE PUBLICATION " + pub);
    if (!created) return tl::unexpected(created.error());
    change.created = true;
    for (const Table& t : resolved) change.added.push_back(t.name);
    return change;
  }
  if (Text(found->get(), 0, 0) == "true") return change;  // FOR ALL TABLES

  auto present =
      Exec(sql_.get(),
           "SELECT pg_catalog.format('%I.%I', schemaname, tablename)::regclass::oid::text "
           "FROM pg_catalog.pg_publication_tables WHERE pubname = $1",
           {pub}, CommandDeadline(), "listing the tables of publication " + pub);
  if (!present) return tl::unexpected(present.error());
  std::vector<Table> missing;
  for (const Table& t : resolved) {
    bool in = false;
    for (int i = 0; i < PQntuples(present->get()) && !in; ++i)
      in = Text(present->get(), i, 0) == t.oid;
    if (!in) missing.push_back(t);
  }
  if (missing.empty()) return change;
  const std::string sql = "ALTER PUBLICATION " + quoted + " ADD TABLE " + table_list(missing);
  auto altered = Exec(sql_.get(), sql, {}, CommandDeadline(), "ALTER PUBLICATION " + pub);
  if (!altered) return tl::unexpected(altered.error());
  for (const Table& t : missing) change.added.push_back(t.name);
  return change;
}

Result<std::optional<SlotState>> ReplicationStream::FindSlot(std::string_view name) {
  if (auto s = EnsureSqlConnection(); !s) return tl::unexpected(s.error());
  auto r = Exec(sql_.get(),
                "SELECT slot_name::text, coalesce(plugin::text, ''), slot_type, "
                "coalesce(database::text, ''), active::text, confirmed_flush_lsn::text "
                "FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
                {std::string(name)}, CommandDeadline(),
                "looking up replication slot " + std::string(name));
  if (!r) return tl::unexpected(r.error());
  if (PQntuples(r->get()) == 0) return std::optional<SlotState>();
  const PGresult* res = r->get();
  SlotState slot;
  slot.name = Text(res, 0, 0);
  slot.plugin = Text(res, 0, 1);
  slot.slot_type = Text(res, 0, 2);
  slot.database = Text(res, 0, 3);
  slot.active = Text(res, 0, 4) == "true";
  if (!PQgetisnull(res, 0, 5)) {
    auto lsn = ParseLsn(Text(res, 0, 5));
    if (!lsn) return tl::unexpected(lsn.error());
    slot.confirmed_flush = *lsn;
  }
  return std::optional<SlotState>(std::move(slot));
}

Result<CreatedSlot> ReplicationStream::CreateSlot(std::string_view name, SlotLifetime lifetime) {
  if (auto s = CheckSlotName(name); !s) return tl::unexpected(s.error());
  if (streaming_) return MakeError(ErrorCode::kInternal, "CREATE_REPLICATION_SLOT while streaming");
  const std::string slot(name);
  const char* temporary = lifetime == SlotLifetime::kTemporary ? " TEMPORARY" : "";
  auto r = Exec(repl_.get(),
                "CREATE_REPLICATION_SLOT " + slot + temporary + " LOGICAL pgoutput EXPORT_SNAPSHOT",
                {}, CommandDeadline(), "CREATE_REPLICATION_SLOT " + slot);
  if (!r) return tl::unexpected(r.error());
  const PGresult* res = r->get();
  if (PQntuples(res) != 1 || PQnfields(res) < 3) {
    return Corruption("CREATE_REPLICATION_SLOT: unexpected answer shape");
  }
  CreatedSlot created;
  created.name = Text(res, 0, 0);
  auto lsn = ParseLsn(Text(res, 0, 1));
  if (!lsn) return tl::unexpected(lsn.error());
  created.consistent_point = *lsn;
  created.snapshot = Text(res, 0, 2);
  return created;
}

Status ReplicationStream::Start(std::string_view slot, Lsn start, std::string_view publication) {
  if (auto s = CheckSlotName(slot); !s) return s;
  if (auto s = CheckPublicationName(publication); !s) return s;
  if (streaming_) return MakeError(ErrorCode::kInternal, "START_REPLICATION while streaming");
  // publication_names is a string literal holding a list of (double-quoted) identifiers.
  std::string names = "\"";
  for (char c : publication) {
    if (c == '"')
      names += "\"\"";
    else if (c == '\'')
      names += "''";
    else
      names += c;
  }
  names += "\"";
  const std::string command = "START_REPLICATION SLOT " + std::string(slot) + " LOGICAL " +
                              FormatLsn(start) + " (proto_version '1', publication_names '" +
                              names + "')";
  auto r = Exec(repl_.get(), command, {}, CommandDeadline(),
                "START_REPLICATION SLOT " + std::string(slot));
  if (!r) return tl::unexpected(r.error());
  if (PQresultStatus(r->get()) != PGRES_COPY_BOTH) {
    return IOError("START_REPLICATION: the server did not start streaming (" +
                   std::string(PQresStatus(PQresultStatus(r->get()))) + ")");
  }
  if (PQsetnonblocking(repl_.get(), 1) != 0) {
    return IOError("START_REPLICATION: cannot make the connection non-blocking: " +
                   ConnectionError(repl_.get()));
  }
  streaming_ = true;
  return OkStatus();
}

Result<std::optional<std::string>> ReplicationStream::Next(std::chrono::milliseconds timeout) {
  if (!streaming_)
    return MakeError(ErrorCode::kUnavailable, "the replication stream is not running");
  pg_conn* const conn = repl_.get();
  const Deadline deadline = Deadline::In(timeout);
  auto broken = [&]() {
    streaming_ = false;
    return IOError("replication stream broken: " + ConnectionError(conn));
  };
  for (;;) {
    char* buffer = nullptr;
    const int n = PQgetCopyData(conn, &buffer, /*async=*/1);
    if (n > 0) {
      std::string frame(buffer, static_cast<size_t>(n));
      PQfreemem(buffer);
      return std::optional<std::string>(std::move(frame));
    }
    if (n == -1) {  // the server ended the COPY; its final result says why
      streaming_ = false;
      PgResult r(PQgetResult(conn));
      std::string why = "the server ended the replication stream";
      if (r != nullptr && PQresultStatus(r.get()) == PGRES_FATAL_ERROR) {
        why += ": " + OneLine(PQresultErrorMessage(r.get()));
      }
      return MakeError(ErrorCode::kUnavailable, why);
    }
    if (n == -2) return broken();
    // n == 0: no whole frame buffered yet.
    auto ready = WaitSocket(conn, true, false, deadline);
    if (!ready) return broken();
    if (ready->timed_out) return std::optional<std::string>();
    if (PQconsumeInput(conn) == 0) return broken();
  }
}

Status ReplicationStream::SendStatus(Lsn written, Lsn flushed, Lsn applied, bool reply_requested) {
  if (!streaming_)
    return MakeError(ErrorCode::kUnavailable, "the replication stream is not running");
  const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  StandbyStatusUpdate update;
  update.write = written;
  update.flush = flushed;
  update.apply = applied;
  update.client_time = UnixMicrosToPgMicros(now);
  update.reply_requested = reply_requested;
  const std::string message = EncodeStandbyStatusUpdate(update);

  pg_conn* const conn = repl_.get();
  const Deadline deadline = Deadline::In(options_.send_timeout);
  auto broken = [&]() {
    streaming_ = false;
    return IOError("sending a standby status update failed: " + ConnectionError(conn));
  };
  auto timed_out = [&]() {
    return MakeError(ErrorCode::kUnavailable,
                     "sending a standby status update: the socket stayed full for " +
                         std::to_string(options_.send_timeout.count()) + " ms");
  };
  for (;;) {
    const int queued = PQputCopyData(conn, message.data(), static_cast<int>(message.size()));
    if (queued == 1) break;
    if (queued < 0) return broken();
    auto ready = WaitSocket(conn, false, true, deadline);  // queued 0: libpq's buffer is full
    if (!ready) return broken();
    if (ready->timed_out) return timed_out();
    if (PQflush(conn) < 0) return broken();
  }
  for (;;) {
    const int left = PQflush(conn);
    if (left == 0) return OkStatus();
    if (left < 0) return broken();
    // Read while waiting: a server blocked on writing to us would never read our update.
    auto ready = WaitSocket(conn, true, true, deadline);
    if (!ready) return broken();
    if (ready->timed_out) return timed_out();
    if (ready->readable && PQconsumeInput(conn) == 0) return broken();
  }
}

void ReplicationStream::Close() {
  pg_conn* const conn = repl_.get();
  if (conn != nullptr && streaming_ && PQstatus(conn) == CONNECTION_OK) {
    // CopyDone, then wait (briefly) for the server's: by then it has read every status
    // update sent before, so the slot's confirmed position is what was last acknowledged.
    const Deadline deadline = Deadline::In(std::chrono::seconds(2));
    auto ready = [&](bool write) {
      auto wait = WaitSocket(conn, true, write, deadline);
      return wait && !wait->timed_out;
    };
    if (PQputCopyEnd(conn, nullptr) == 1) {
      while (PQflush(conn) == 1 && ready(true)) PQconsumeInput(conn);
      for (;;) {
        char* buffer = nullptr;
        const int n = PQgetCopyData(conn, &buffer, 1);
        if (n > 0) {
          PQfreemem(buffer);
          continue;
        }
        if (n < 0) break;
        if (!ready(false) || PQconsumeInput(conn) == 0) break;
      }
      while (!deadline.passed()) {
        while (PQisBusy(conn) && ready(false) && PQconsumeInput(conn) != 0) {
        }
        if (PQisBusy(conn)) break;
        PgResult r(PQgetResult(conn));
        if (r == nullptr) break;
      }
    }
  }
  streaming_ = false;
  repl_.reset();
  sql_.reset();
}

}  // namespace tally::postgres
