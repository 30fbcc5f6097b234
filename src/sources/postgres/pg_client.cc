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

Error Broken(std::string_view what, const pg_conn* conn) {
  return Error{ErrorCode::kIOError, std::string(what) + " failed: " + ConnectionError(conn)};
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

std::string ConnectFailure::Describe(std::string_view attempt) const {
  std::string out(attempt);
  if (!database.empty()) out += " to database \"" + database + "\"";
  if (!user.empty()) out += " as user \"" + user + "\"";
  return out + ": " + reason;
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
  auto fail = [&](std::string reason) {
    ConnectFailure failure{std::move(reason), {}, {}};
    if (conn != nullptr) {
      const char* db = PQdb(conn.get());
      const char* user = PQuser(conn.get());
      if (db != nullptr) failure.database = db;
      if (user != nullptr) failure.user = user;
    }
    return tl::unexpected(std::move(failure));
  };
  if (conn == nullptr) return fail("out of memory");
  if (PQstatus(conn.get()) == CONNECTION_BAD) return fail(ConnectionError(conn.get()));
  const Deadline deadline = Deadline::In(options.timeout);
  PostgresPollingStatusType state = PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK) {
    if (state == PGRES_POLLING_FAILED) return fail(ConnectionError(conn.get()));
    auto ready = WaitSocket(conn.get(), state == PGRES_POLLING_READING,
                            state == PGRES_POLLING_WRITING, deadline);
    if (!ready) return fail(ready.error().message);
    if (ready->timed_out) {
      return fail("no connection within " + std::to_string(options.timeout.count()) + " ms");
    }
    state = PQconnectPoll(conn.get());
  }
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
    return IOError(std::string(what) + " failed: " +
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
