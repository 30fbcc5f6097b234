#include "sources/postgres/pg_client.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "core/integer.h"

namespace tally::postgres {
namespace {

using PollEvents = decltype(pollfd{}.revents);

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

Error NoAnswer(std::string_view what, const Deadline& deadline) {
  return Error{ErrorCode::kUnavailable, std::string(what) + ": no answer within " +
                                            std::to_string(deadline.limit().count()) + " ms"};
}

// The connection is gone: trying again on a new one may work.
bool Lost(const pg_conn* conn) { return conn == nullptr || PQstatus(conn) == CONNECTION_BAD; }

// A command that could not be sent or whose answer could not be read: Unavailable when the
// connection is lost.
Error Broken(std::string_view what, const pg_conn* conn) {
  return Error{Lost(conn) ? ErrorCode::kUnavailable : ErrorCode::kIOError,
               std::string(what) + " failed: " + ConnectionError(conn)};
}

// How libpq words a failed attempt that a later one may get past, by the start of its
// reason (the text after "… failed: "): connect() refused or unreachable (strerror's
// texts, followed by libpq's "Is the server running…?"), or the connection lost while it
// was being set up.
constexpr std::string_view kTransientReasons[] = {
    "Connection refused",
    "No such file or directory",  // a Unix socket's file: no server has made it (yet)
    "Connection timed out",
    "Connection reset by peer",
    "Software caused connection abort",
    "No route to host",
    "Network is unreachable",
    "Network is down",
    "Host is down",
    "Cannot assign requested address",
    "Resource temporarily unavailable",  // a Unix socket's backlog full
    "Broken pipe",
    "server closed the connection unexpectedly",
    "could not receive data from server:",
    "could not send data to server:",
    "could not send startup packet:",
    "could not send SSL negotiation packet:",
    "SSL SYSCALL error:",
    "timeout expired",
};

// The SQLSTATE of a server's refusal in verbose form, "FATAL:  57P03: the database …": five
// digits or upper-case letters between the severity's ":  " and ": ". Its offset in `line`,
// npos when there is none.
size_t SqlStateAt(std::string_view line) {
  const size_t severity = line.find(":  ");
  if (severity == std::string_view::npos) return std::string_view::npos;
  const size_t at = severity + 3;
  if (line.size() < at + 7 || line.substr(at + 5, 2) != ": ") return std::string_view::npos;
  for (const char c : line.substr(at, 5)) {
    if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z'))) return std::string_view::npos;
  }
  return at;
}

}  // namespace

void ConnDeleter::operator()(pg_conn* conn) const { PQfinish(conn); }

void ResultDeleter::operator()(pg_result* result) const { PQclear(result); }

std::chrono::milliseconds Deadline::Left(std::chrono::milliseconds most) const {
  if (!at_) return most;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*at_ - Clock::now());
  return std::clamp(left, std::chrono::milliseconds(0), most);
}

std::string OneLine(std::string_view text) {
  std::string out;
  bool broken = false;  // a line break or tab since the last word
  size_t blanks = 0;    // spaces since the last word, kept unless a break comes among them
  for (const char c : text) {
    if (IsBlank(c)) {
      if (c == ' ') {
        ++blanks;
      } else {
        broken = true;
      }
      continue;
    }
    if (!out.empty()) out.append(broken ? 1 : blanks, ' ');
    broken = false;
    blanks = 0;
    out.push_back(c);
  }
  return out;
}

std::string ConnectionError(const pg_conn* conn) {
  return conn == nullptr ? "out of memory" : OneLine(PQerrorMessage(conn));
}

Result<ConnParams> ParseConnString(std::string_view conninfo) {
  char* parse_error = nullptr;
  const std::string text(conninfo);
  PQconninfoOption* options = PQconninfoParse(text.c_str(), &parse_error);
  if (options == nullptr) {
    std::string why = parse_error != nullptr ? OneLine(parse_error) : "out of memory";
    PQfreemem(parse_error);
    return InvalidArgument(std::move(why));
  }
  ConnParams params;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val != nullptr) params.emplace_back(o->keyword, o->val);
  }
  PQconninfoFree(options);
  return params;
}

const std::string* FindParam(const ConnParams& params, std::string_view key) {
  const auto it = std::ranges::find(params, key, &ConnParams::value_type::first);
  return it == params.end() ? nullptr : &it->second;
}

std::string FormatConnString(const ConnParams& params) {
  std::string out;
  for (const auto& [key, value] : params) {
    if (!out.empty()) out.push_back(' ');
    out += key + "='";
    for (const char c : value) {
      if (c == '\'' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    out.push_back('\'');
  }
  return out;
}

bool TransientSqlState(std::string_view sqlstate) {
  if (sqlstate.size() != 5) return false;
  const std::string_view sqlclass = sqlstate.substr(0, 2);
  return sqlclass == "08" || sqlclass == "40" || sqlclass == "53" || sqlclass == "57" ||
         sqlclass == "58";
}

std::string ConnectFailure::Describe(std::string_view attempt) const {
  std::string out(attempt);
  if (!database.empty()) out += " to database \"" + database + "\"";
  if (!user.empty()) out += " as user \"" + user + "\"";
  return out + ": " + reason;
}

Error ConnectFailure::ToError(std::string_view attempt) const {
  return Error{transient ? ErrorCode::kUnavailable : ErrorCode::kInvalidArgument,
               Describe(attempt)};
}

ConnectFailure ReadConnectFailure(std::string_view verbose_message) {
  ConnectFailure failure;
  std::string text;  // the message as libpq gives it by default
  std::string_view rest = verbose_message;
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (line.starts_with("LOCATION:  ")) continue;
    // One line per attempt (host): "connection to server at … failed: <reason>", or a
    // reason of its own (a host name that does not resolve); then DETAIL, HINT, and libpq's
    // hints on lines of their own.
    const size_t failed = line.find(" failed: ");
    const size_t start = failed == std::string_view::npos ? 0 : failed + 9;
    const std::string_view reason = line.substr(start);
    if (const size_t at = SqlStateAt(reason); at != std::string_view::npos) {
      failure.transient = failure.transient || TransientSqlState(reason.substr(at, 5));
      text.append(line.substr(0, start + at)).append(line.substr(start + at + 7));
    } else {
      failure.transient =
          failure.transient ||
          std::ranges::any_of(kTransientReasons,
                              [&](std::string_view r) { return reason.starts_with(r); }) ||
          (reason.starts_with("could not translate host name") &&
           reason.ends_with(": Temporary failure in name resolution"));
      text.append(line);
    }
    text.push_back('\n');
  }
  failure.reason = OneLine(text);
  return failure;
}

tl::expected<PgConn, ConnectFailure> Connect(const ConnParams& params,
                                             const ConnectOptions& options) {
  std::vector<const char*> keys;
  std::vector<const char*> values;
  for (const auto& [key, value] : params) {
    if (key == "replication") continue;  // options.replication decides
    keys.push_back(key.c_str());
    values.push_back(value.c_str());
  }
  if (options.replication) {
    keys.push_back("replication");
    values.push_back("database");
  }
  if (FindParam(params, "application_name") == nullptr && !options.application_name.empty()) {
    keys.push_back("application_name");
    values.push_back(options.application_name.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);

  // The parameters are parsed already: dbname is a name, not a connection string to expand.
  PgConn conn(PQconnectStartParams(keys.data(), values.data(), /*expand_dbname=*/0));
  // A refusal's SQLSTATE in its message (ReadConnectFailure); queries' messages as usual.
  if (conn != nullptr) PQsetErrorVerbosity(conn.get(), PQERRORS_VERBOSE);
  auto fail = [&](ConnectFailure failure) {
    if (conn != nullptr) {
      const char* db = PQdb(conn.get());
      const char* user = PQuser(conn.get());
      if (db != nullptr) failure.database = db;
      if (user != nullptr) failure.user = user;
    }
    return tl::unexpected(std::move(failure));
  };
  const auto transient = [](std::string reason) {
    ConnectFailure failure;
    failure.reason = std::move(reason);
    failure.transient = true;
    return failure;
  };
  if (conn == nullptr) return fail(transient("out of memory"));
  if (PQstatus(conn.get()) == CONNECTION_BAD) {
    return fail(ReadConnectFailure(PQerrorMessage(conn.get())));
  }
  const Deadline deadline = Deadline::In(options.timeout);
  PostgresPollingStatusType state = PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK) {
    if (state == PGRES_POLLING_FAILED) return fail(ReadConnectFailure(PQerrorMessage(conn.get())));
    auto ready = WaitSocket(conn.get(), state == PGRES_POLLING_READING,
                            state == PGRES_POLLING_WRITING, deadline);
    if (!ready) return fail(transient(ready.error().message));
    if (ready->timed_out) {
      return fail(
          transient("no connection within " + std::to_string(options.timeout.count()) + " ms"));
    }
    state = PQconnectPoll(conn.get());
  }
  PQsetErrorVerbosity(conn.get(), PQERRORS_DEFAULT);
  return conn;
}

Result<SocketWait> WaitSocket(pg_conn* conn, bool read, bool write, const Deadline& deadline) {
  const int fd = PQsocket(conn);
  if (fd < 0) return IOError("the connection has no socket");
  const auto events = static_cast<PollEvents>((read ? POLLIN : 0) | (write ? POLLOUT : 0));
  for (;;) {
    pollfd p{fd, events, 0};
    // Unbounded waits wake every second anyway: harmless, and poll takes an int.
    const auto wait = deadline.Left(std::chrono::milliseconds(1000));
    const int n = poll(&p, 1, static_cast<int>(wait.count()));
    if (n < 0 && errno != EINTR) {
      return IOError("poll: " + std::error_code(errno, std::generic_category()).message());
    }
    if (n > 0) {
      SocketWait seen;
      seen.readable = (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
      seen.writable = (p.revents & (POLLOUT | POLLERR)) != 0;
      return seen;
    }
    if (deadline.passed()) return SocketWait{.timed_out = true};
  }
}

Status Send(pg_conn* conn, const std::string& sql, const std::vector<std::string>& params,
            const Deadline& deadline, std::string_view what) {
  if (conn == nullptr) {
    return MakeError(ErrorCode::kUnavailable, std::string(what) + ": not connected");
  }
  int sent = 0;
  if (params.empty()) {
    sent = PQsendQuery(conn, sql.c_str());
  } else {
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const std::string& p : params) values.push_back(p.c_str());
    sent = PQsendQueryParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, /*resultFormat=*/0);
  }
  if (sent == 0) return tl::unexpected(Broken(what, conn));
  // A non-blocking connection may hold part of the command back: flush it, reading while
  // waiting (a server blocked on writing to us would never read the rest).
  while (PQflush(conn) == 1) {
    auto ready = WaitSocket(conn, true, true, deadline);
    if (!ready) return tl::unexpected(Broken(what, conn));
    if (ready->timed_out) return tl::unexpected(NoAnswer(what, deadline));
    if (PQconsumeInput(conn) == 0) return tl::unexpected(Broken(what, conn));
  }
  return OkStatus();
}

Result<PgResult> NextResult(pg_conn* conn, const Deadline& deadline, std::string_view what) {
  while (PQisBusy(conn)) {
    auto ready = WaitSocket(conn, true, false, deadline);
    if (!ready) return tl::unexpected(Broken(what, conn));
    if (ready->timed_out) return tl::unexpected(NoAnswer(what, deadline));
    if (PQconsumeInput(conn) == 0) return tl::unexpected(Broken(what, conn));
  }
  return PgResult(PQgetResult(conn));
}

Result<PgResult> Exec(pg_conn* conn, const std::string& sql, const std::vector<std::string>& params,
                      const Deadline& deadline, std::string_view what) {
  if (auto sent = Send(conn, sql, params, deadline, what); !sent) {
    return tl::unexpected(sent.error());
  }
  PgResult kept;
  for (;;) {
    auto next = NextResult(conn, deadline, what);
    if (!next) return tl::unexpected(next.error());
    if (*next == nullptr) break;
    const ExecStatusType status = PQresultStatus(next->get());
    if (status == PGRES_COPY_BOTH) return std::move(*next);  // no more until the stream ends
    // The first failure wins; the results after it (none, normally) are drained.
    const bool kept_failure = kept != nullptr && PQresultStatus(kept.get()) != PGRES_COMMAND_OK &&
                              PQresultStatus(kept.get()) != PGRES_TUPLES_OK;
    if (!kept_failure) kept = std::move(*next);
  }
  if (kept == nullptr) return tl::unexpected(Broken(what, conn));
  const ExecStatusType status = PQresultStatus(kept.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    const char* message = PQresultErrorMessage(kept.get());
    const char* sqlstate = PQresultErrorField(kept.get(), PG_DIAG_SQLSTATE);
    const bool transient = (sqlstate != nullptr && TransientSqlState(sqlstate)) || Lost(conn);
    return MakeError(
        transient ? ErrorCode::kUnavailable : ErrorCode::kIOError,
        std::string(what) + " failed: " +
            OneLine(message != nullptr && *message != '\0' ? message : PQresStatus(status)));
  }
  return kept;
}

Status BeginSnapshotTransaction(pg_conn* conn, std::string_view snapshot,
                                const Deadline& deadline) {
  for (const std::string& sql : {std::string("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
                                 "SET TRANSACTION SNAPSHOT '" + std::string(snapshot) + "'"}) {
    if (auto r = Exec(conn, sql, {}, deadline, sql); !r) return tl::unexpected(r.error());
  }
  return OkStatus();
}

Result<std::string> QuoteIdentifier(pg_conn* conn, std::string_view name) {
  char* quoted = PQescapeIdentifier(conn, name.data(), name.size());
  if (quoted == nullptr) {
    return InvalidArgument("cannot quote \"" + std::string(name) + "\": " + ConnectionError(conn));
  }
  std::string out(quoted);
  PQfreemem(quoted);
  return out;
}

std::string Text(const pg_result* result, int row, int column) {
  if (PQgetisnull(result, row, column)) return {};
  return {PQgetvalue(result, row, column), static_cast<size_t>(PQgetlength(result, row, column))};
}

Result<uint64_t> UnsignedValue(const pg_result* result, int row, int column, uint64_t max) {
  const std::string text = Text(result, row, column);
  const std::optional<uint64_t> value = ParseUint64(text);
  if (value && *value <= max) return *value;
  const char* name = PQfname(result, column);
  return Corruption("column " + std::string(name != nullptr ? name : "?") + ": '" +
                    text.substr(0, 40) + "' is not " +
                    (max == UINT64_MAX ? std::string("an unsigned integer")
                                       : "an integer from 0 to " + std::to_string(max)));
}

}  // namespace tally::postgres
