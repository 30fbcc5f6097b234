#include "sources/postgres/replication_stream.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <system_error>
#include <utility>

namespace tally::postgres {
namespace {

using Clock = std::chrono::steady_clock;
using PollEvents = decltype(pollfd{}.revents);

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// libpq's messages end in a newline and sometimes span lines ("…failed: Connection refused
// \n\tIs the server running…?"); errors here are one line.
std::string OneLine(std::string_view text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty() && out.back() != ' ') out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string ConnError(pg_conn* conn) {
  return conn == nullptr ? "out of memory" : OneLine(PQerrorMessage(conn));
}

int64_t RemainingMillis(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : left.count();
}

// Waits until the connection's socket is readable (and/or writable) or the deadline passes.
// 1: ready (which way is in *revents), 0: timed out, -1: error (errno).
int WaitSocket(pg_conn* conn, bool read, bool write, Clock::time_point deadline,
               PollEvents* revents = nullptr) {
  const int fd = PQsocket(conn);
  if (fd < 0) {
    errno = EBADF;
    return -1;
  }
  for (;;) {
    pollfd p{fd, static_cast<PollEvents>((read ? POLLIN : 0) | (write ? POLLOUT : 0)), 0};
    const int64_t wait = RemainingMillis(deadline);
    const int n = poll(&p, 1, static_cast<int>(wait > 1'000'000 ? 1'000'000 : wait));
    if (n < 0 && errno == EINTR) {
      if (RemainingMillis(deadline) == 0) return 0;
      continue;
    }
    if (n < 0) return -1;
    if (n == 0) {
      if (RemainingMillis(deadline) == 0) return 0;
      continue;
    }
    if (revents != nullptr) *revents = p.revents;
    return 1;
  }
}

// Runs one command and collects its results, each wait bounded by `timeout`. Returns the
// command's result (the CopyBoth result for START_REPLICATION), or an error prefixed with
// `what`. The simple query protocol (the only one a replication connection takes) unless
// there are parameters.
Result<PgResult> Exec(pg_conn* conn, const std::string& sql, const std::vector<std::string>& params,
                      std::chrono::milliseconds timeout, std::string_view what) {
  if (conn == nullptr)
    return MakeError(ErrorCode::kUnavailable, std::string(what) + ": not connected");
  int sent = 0;
  if (params.empty()) {
    sent = PQsendQuery(conn, sql.c_str());
  } else {
    std::vector<const char*> values;
    for (const std::string& p : params) values.push_back(p.c_str());
    sent = PQsendQueryParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, 0);
  }
  if (sent == 0) return IOError(std::string(what) + " failed: " + ConnError(conn));
  const Clock::time_point deadline = Clock::now() + timeout;
  while (PQflush(conn) == 1) {
    if (WaitSocket(conn, true, true, deadline) <= 0) {
      return MakeError(ErrorCode::kUnavailable, std::string(what) + ": no answer within " +
                                                    std::to_string(timeout.count()) + " ms");
    }
    if (PQconsumeInput(conn) == 0)
      return IOError(std::string(what) + " failed: " + ConnError(conn));
  }
  PgResult kept;
  for (;;) {
    while (PQisBusy(conn)) {
      const int ready = WaitSocket(conn, true, false, deadline);
      if (ready == 0) {
        return MakeError(ErrorCode::kUnavailable, std::string(what) + ": no answer within " +
                                                      std::to_string(timeout.count()) + " ms");
      }
      if (ready < 0 || PQconsumeInput(conn) == 0) {
        return IOError(std::string(what) + " failed: " + ConnError(conn));
      }
    }
    PgResult r(PQgetResult(conn));
    if (r == nullptr) break;
    const ExecStatusType status = PQresultStatus(r.get());
    if (status == PGRES_COPY_BOTH) return r;  // no more results until the stream ends
    // The first error wins; later results (none, normally) are drained.
    const bool kept_error = kept != nullptr && PQresultStatus(kept.get()) == PGRES_FATAL_ERROR;
    if (!kept_error) kept = std::move(r);
  }
  if (kept == nullptr) return IOError(std::string(what) + " failed: " + ConnError(conn));
  const ExecStatusType status = PQresultStatus(kept.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    const char* message = PQresultErrorMessage(kept.get());
    return IOError(std::string(what) + " failed: " +
                   OneLine(message != nullptr && *message != '\0' ? message : PQresStatus(status)));
  }
  return kept;
}

std::string Value(const PGresult* r, int row, int column) {
  if (PQgetisnull(r, row, column)) return {};
  return {PQgetvalue(r, row, column), static_cast<size_t>(PQgetlength(r, row, column))};
}

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

// The connection string, parsed once: keyword/value pairs as given (no defaults).
struct ReplicationStream::Params {
  std::vector<std::pair<std::string, std::string>> pairs;

  bool Has(std::string_view key) const {
    return std::ranges::any_of(pairs, [&](const auto& pair) { return pair.first == key; });
  }
};

namespace {

// Connects with the parsed parameters (plus replication=database when asked), bounded by
// `timeout`. The error names what was attempted; libpq's message never holds the password.
Result<pg_conn*> Connect(const std::vector<std::pair<std::string, std::string>>& pairs,
                         bool replication, const std::string& application_name,
                         bool has_application_name, std::chrono::milliseconds timeout) {
  std::vector<const char*> keys;
  std::vector<const char*> values;
  for (const auto& [k, v] : pairs) {
    if (k == "replication") continue;  // ours decides
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  if (replication) {
    keys.push_back("replication");
    values.push_back("database");
  }
  if (!has_application_name && !application_name.empty()) {
    keys.push_back("application_name");
    values.push_back(application_name.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);

  pg_conn* conn = PQconnectStartParams(keys.data(), values.data(), /*expand_dbname=*/0);
  auto fail = [&](const std::string& why) -> Result<pg_conn*> {
    std::string attempted = replication ? "cannot open a replication connection" : "cannot connect";
    if (conn != nullptr) {
      const char* db = PQdb(conn);
      const char* user = PQuser(conn);
      if (db != nullptr && *db != '\0') attempted += std::string(" to database \"") + db + "\"";
      if (user != nullptr && *user != '\0') attempted += std::string(" as user \"") + user + "\"";
      PQfinish(conn);
    }
    return MakeError(ErrorCode::kUnavailable, attempted + ": " + why);
  };
  if (conn == nullptr) return fail("out of memory");
  if (PQstatus(conn) == CONNECTION_BAD) return fail(ConnError(conn));
  const Clock::time_point deadline = Clock::now() + timeout;
  PostgresPollingStatusType state = PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK) {
    if (state == PGRES_POLLING_FAILED) return fail(ConnError(conn));
    const int ready =
        WaitSocket(conn, state == PGRES_POLLING_READING, state == PGRES_POLLING_WRITING, deadline);
    if (ready == 0) {
      return fail("no connection within " + std::to_string(timeout.count()) + " ms");
    }
    if (ready < 0)
      return fail("poll: " + std::error_code(errno, std::generic_category()).message());
    state = PQconnectPoll(conn);
  }
  return conn;
}

}  // namespace

ReplicationStream::ReplicationStream(ReplicationOptions options) : options_(std::move(options)) {}

ReplicationStream::~ReplicationStream() { Close(); }

Status ReplicationStream::Open(std::string_view conninfo) {
  if (repl_ != nullptr) return MakeError(ErrorCode::kInternal, "replication stream already open");
  char* parse_error = nullptr;
  const std::string text(conninfo);
  PQconninfoOption* options = PQconninfoParse(text.c_str(), &parse_error);
  if (options == nullptr) {
    std::string why = parse_error != nullptr ? OneLine(parse_error) : "out of memory";
    PQfreemem(parse_error);
    return InvalidArgument("invalid connection string: " + why);
  }
  auto params = std::make_unique<Params>();
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val != nullptr) params->pairs.emplace_back(o->keyword, o->val);
  }
  PQconninfoFree(options);

  auto conn = Connect(params->pairs, /*replication=*/true, options_.application_name,
                      params->Has("application_name"), options_.connect_timeout);
  if (!conn) return tl::unexpected(conn.error());
  repl_ = *conn;
  const char* host = PQhost(repl_);
  const char* port = PQport(repl_);
  target_ = std::string(host != nullptr ? host : "") + ":" + (port != nullptr ? port : "") +
            ", database " + PQdb(repl_) + ", user " + PQuser(repl_);
  params_ = std::move(params);
  return OkStatus();
}

Status ReplicationStream::EnsureSqlConnection() {
  if (sql_ != nullptr) return OkStatus();
  if (params_ == nullptr) return MakeError(ErrorCode::kInternal, "replication stream not open");
  auto conn = Connect(params_->pairs, /*replication=*/false, options_.application_name,
                      params_->Has("application_name"), options_.connect_timeout);
  if (!conn) return tl::unexpected(conn.error());
  sql_ = *conn;
  return OkStatus();
}

Result<SystemIdentity> ReplicationStream::IdentifySystem() {
  if (streaming_) return MakeError(ErrorCode::kInternal, "IDENTIFY_SYSTEM while streaming");
  auto r = Exec(repl_, "IDENTIFY_SYSTEM", {}, options_.command_timeout, "IDENTIFY_SYSTEM");
  if (!r) return tl::unexpected(r.error());
  const PGresult* res = r->get();
  if (PQntuples(res) != 1 || PQnfields(res) < 4) {
    return Corruption("IDENTIFY_SYSTEM: unexpected answer shape");
  }
  SystemIdentity id;
  id.system_id = Value(res, 0, 0);
  id.timeline = std::strtoll(Value(res, 0, 1).c_str(), nullptr, 10);
  auto lsn = ParseLsn(Value(res, 0, 2));
  if (!lsn) return tl::unexpected(lsn.error());
  id.xlogpos = *lsn;
  id.dbname = Value(res, 0, 3);
  return id;
}

namespace {

Result<Table> ResolveTable(pg_conn* sql, const std::string& name,
                           std::chrono::milliseconds timeout) {
  auto r = Exec(sql,
                "SELECT c.oid::text, c.oid::regclass::text, c.relreplident::text "
                "FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1)",
                {name}, timeout, "looking up table " + name);
  if (!r) return tl::unexpected(r.error());
  if (PQntuples(r->get()) != 1) {
    return MakeError(ErrorCode::kNotFound, "table \"" + name + "\" does not exist");
  }
  Table t;
  t.oid = Value(r->get(), 0, 0);
  t.name = Value(r->get(), 0, 1);
  const std::string identity = Value(r->get(), 0, 2);
  t.replica_identity = identity.empty() ? 'd' : identity[0];
  return t;
}

}  // namespace

Status ReplicationStream::CheckReplicaIdentityFull(const std::vector<std::string>& tables) {
  if (auto s = EnsureSqlConnection(); !s) return s;
  for (const std::string& name : tables) {
    auto t = ResolveTable(sql_, name, options_.command_timeout);
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
    auto table = ResolveTable(sql_, t, options_.command_timeout);
    if (!table) return tl::unexpected(table.error());
    resolved.push_back(*table);
  }
  const std::string pub(name);
  char* quoted_raw = PQescapeIdentifier(sql_, pub.data(), pub.size());
  if (quoted_raw == nullptr) return InvalidArgument("publication name: " + ConnError(sql_));
  const std::string quoted(quoted_raw);
  PQfreemem(quoted_raw);

  auto found =
      Exec(sql_, "SELECT puballtables::text FROM pg_catalog.pg_publication WHERE pubname = $1",
           {pub}, options_.command_timeout, "looking up publication " + pub);
  if (!found) return tl::unexpected(found.error());
  PublicationChange change;
  auto table_list = [](const std::vector<Table>& list) {
    std::string out;
    for (const Table& t : list) out += (out.empty() ? "" : ", ") + t.name;
    return out;
  };
  if (PQntuples(found->get()) == 0) {
    const std::string sql = "CREATE PUBLICATION " + quoted + " FOR TABLE " + table_list(resolved);
    auto created = Exec(sql_, sql, {}, options_.command_timeout, "CREATE PUBLICATION " + pub);
    if (!created) return tl::unexpected(created.error());
    change.created = true;
    for (const Table& t : resolved) change.added.push_back(t.name);
    return change;
  }
  if (Value(found->get(), 0, 0) == "true") return change;  // FOR ALL TABLES

  auto present =
      Exec(sql_,
           "SELECT pg_catalog.format('%I.%I', schemaname, tablename)::regclass::oid::text "
           "FROM pg_catalog.pg_publication_tables WHERE pubname = $1",
           {pub}, options_.command_timeout, "listing the tables of publication " + pub);
  if (!present) return tl::unexpected(present.error());
  std::vector<Table> missing;
  for (const Table& t : resolved) {
    bool in = false;
    for (int i = 0; i < PQntuples(present->get()) && !in; ++i)
      in = Value(present->get(), i, 0) == t.oid;
    if (!in) missing.push_back(t);
  }
  if (missing.empty()) return change;
  const std::string sql = "ALTER PUBLICATION " + quoted + " ADD TABLE " + table_list(missing);
  auto altered = Exec(sql_, sql, {}, options_.command_timeout, "ALTER PUBLICATION " + pub);
  if (!altered) return tl::unexpected(altered.error());
  for (const Table& t : missing) change.added.push_back(t.name);
  return change;
}

Result<std::optional<SlotState>> ReplicationStream::FindSlot(std::string_view name) {
  if (auto s = EnsureSqlConnection(); !s) return tl::unexpected(s.error());
  auto r = Exec(sql_,
                "SELECT slot_name::text, coalesce(plugin::text, ''), slot_type, "
                "coalesce(database::text, ''), active::text, confirmed_flush_lsn::text "
                "FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
                {std::string(name)}, options_.command_timeout,
                "looking up replication slot " + std::string(name));
  if (!r) return tl::unexpected(r.error());
  if (PQntuples(r->get()) == 0) return std::optional<SlotState>();
  const PGresult* res = r->get();
  SlotState slot;
  slot.name = Value(res, 0, 0);
  slot.plugin = Value(res, 0, 1);
  slot.slot_type = Value(res, 0, 2);
  slot.database = Value(res, 0, 3);
  slot.active = Value(res, 0, 4) == "true";
  if (!PQgetisnull(res, 0, 5)) {
    auto lsn = ParseLsn(Value(res, 0, 5));
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
  auto r = Exec(repl_,
                "CREATE_REPLICATION_SLOT " + slot + temporary + " LOGICAL pgoutput EXPORT_SNAPSHOT",
                {}, options_.command_timeout, "CREATE_REPLICATION_SLOT " + slot);
  if (!r) return tl::unexpected(r.error());
  const PGresult* res = r->get();
  if (PQntuples(res) != 1 || PQnfields(res) < 3) {
    return Corruption("CREATE_REPLICATION_SLOT: unexpected answer shape");
  }
  CreatedSlot created;
  created.name = Value(res, 0, 0);
  auto lsn = ParseLsn(Value(res, 0, 1));
  if (!lsn) return tl::unexpected(lsn.error());
  created.consistent_point = *lsn;
  created.snapshot = Value(res, 0, 2);
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
  auto r = Exec(repl_, command, {}, options_.command_timeout,
                "START_REPLICATION SLOT " + std::string(slot));
  if (!r) return tl::unexpected(r.error());
  if (PQresultStatus(r->get()) != PGRES_COPY_BOTH) {
    return IOError("START_REPLICATION: the server did not start streaming (" +
                   std::string(PQresStatus(PQresultStatus(r->get()))) + ")");
  }
  if (PQsetnonblocking(repl_, 1) != 0) {
    return IOError("START_REPLICATION: cannot make the connection non-blocking: " +
                   ConnError(repl_));
  }
  streaming_ = true;
  return OkStatus();
}

Result<std::optional<std::string>> ReplicationStream::Next(std::chrono::milliseconds timeout) {
  if (!streaming_)
    return MakeError(ErrorCode::kUnavailable, "the replication stream is not running");
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    char* buffer = nullptr;
    const int n = PQgetCopyData(repl_, &buffer, /*async=*/1);
    if (n > 0) {
      std::string frame(buffer, static_cast<size_t>(n));
      PQfreemem(buffer);
      return std::optional<std::string>(std::move(frame));
    }
    if (n == -1) {  // the server ended the COPY; its final result says why
      streaming_ = false;
      PgResult r(PQgetResult(repl_));
      std::string why = "the server ended the replication stream";
      if (r != nullptr && PQresultStatus(r.get()) == PGRES_FATAL_ERROR) {
        why += ": " + OneLine(PQresultErrorMessage(r.get()));
      }
      return MakeError(ErrorCode::kUnavailable, why);
    }
    if (n == -2) {
      streaming_ = false;
      return IOError("replication stream broken: " + ConnError(repl_));
    }
    // n == 0: no whole frame buffered yet.
    const int ready = WaitSocket(repl_, true, false, deadline);
    if (ready == 0) return std::optional<std::string>();
    if (ready < 0 || PQconsumeInput(repl_) == 0) {
      streaming_ = false;
      return IOError("replication stream broken: " + ConnError(repl_));
    }
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

  const Clock::time_point deadline = Clock::now() + options_.send_timeout;
  auto broken = [&]() {
    streaming_ = false;
    return IOError("sending a standby status update failed: " + ConnError(repl_));
  };
  auto timed_out = [&]() {
    return MakeError(ErrorCode::kUnavailable,
                     "sending a standby status update: the socket stayed full for " +
                         std::to_string(options_.send_timeout.count()) + " ms");
  };
  for (;;) {
    const int queued = PQputCopyData(repl_, message.data(), static_cast<int>(message.size()));
    if (queued == 1) break;
    if (queued < 0) return broken();
    const int ready = WaitSocket(repl_, false, true, deadline);  // 0: libpq's buffer is full
    if (ready == 0) return timed_out();
    if (ready < 0 || PQflush(repl_) < 0) return broken();
  }
  for (;;) {
    const int left = PQflush(repl_);
    if (left == 0) return OkStatus();
    if (left < 0) return broken();
    // Read while waiting: a server blocked on writing to us would never read our update.
    PollEvents revents = 0;
    const int ready = WaitSocket(repl_, true, true, deadline, &revents);
    if (ready == 0) return timed_out();
    if (ready < 0) return broken();
    if ((revents & POLLIN) != 0 && PQconsumeInput(repl_) == 0) return broken();
  }
}

void ReplicationStream::Close() {
  if (repl_ != nullptr && streaming_ && PQstatus(repl_) == CONNECTION_OK) {
    // CopyDone, then wait (briefly) for the server's: by then it has read every status
    // update sent before, so the slot's confirmed position is what was last acknowledged.
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
    if (PQputCopyEnd(repl_, nullptr) == 1) {
      while (PQflush(repl_) == 1 && WaitSocket(repl_, true, true, deadline) > 0) {
        PQconsumeInput(repl_);
      }
      for (;;) {
        char* buffer = nullptr;
        const int n = PQgetCopyData(repl_, &buffer, 1);
        if (n > 0) {
          PQfreemem(buffer);
          continue;
        }
        if (n < 0) break;
        if (WaitSocket(repl_, true, false, deadline) <= 0 || PQconsumeInput(repl_) == 0) break;
      }
      while (RemainingMillis(deadline) > 0) {
        while (PQisBusy(repl_) && WaitSocket(repl_, true, false, deadline) > 0 &&
               PQconsumeInput(repl_) != 0) {
        }
        if (PQisBusy(repl_)) break;
        PgResult r(PQgetResult(repl_));
        if (r == nullptr) break;
      }
    }
  }
  streaming_ = false;
  if (repl_ != nullptr) PQfinish(repl_);
  if (sql_ != nullptr) PQfinish(sql_);
  repl_ = nullptr;
  sql_ = nullptr;
}

}  // namespace tally::postgres
