// The small PostgreSQL client layer over libpq that every libpq user in tally shares: the
// replication stream, the PostgreSQL source and `tally verify`. It owns libpq's handles,
// reads connection strings, connects and runs commands with bounded waits, and puts libpq's
// multi-line messages on one line.
//
// Errors are values (core/status.h), never exceptions. Every message is one line, fit to
// show as it is: it names what was attempted (the caller's `what`) and ends in libpq's or
// the server's reason; it never holds a password (libpq's messages do not). A connection is
// used by one thread at a time (libpq's rule); the functions keep no state of their own.
//
// Waits. Connecting and each command wait at most until a Deadline; one that passes leaves
// the connection in an unknown state (the command may still run on the server): close it.
// Deadline::Never() waits as long as the server takes, for callers that bound nothing else
// either (a backfill's FETCH, a counter's SELECT).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

struct pg_conn;    // libpq's PGconn
struct pg_result;  // libpq's PGresult; libpq-fe.h stays out of this header

namespace tally::postgres {

// Owns a connection: PQfinish when it goes.
struct ConnDeleter {
  void operator()(pg_conn* conn) const;
};
using PgConn = std::unique_ptr<pg_conn, ConnDeleter>;

// Owns a result: PQclear when it goes.
struct ResultDeleter {
  void operator()(pg_result* result) const;
};
using PgResult = std::unique_ptr<pg_result, ResultDeleter>;

// A bound on a wait: a moment `limit` after the Deadline was made, or none. Error messages
// name the limit ("no answer within 120000 ms").
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline Never() { return Deadline(); }
  static Deadline In(std::chrono::milliseconds limit) {
    return Deadline(Clock::now() + limit, limit);
  }

  bool bounded() const { return at_.has_value(); }
  std::chrono::milliseconds limit() const { return limit_; }
  // Milliseconds until the moment, 0 once it has passed; `most` at most (and when unbounded).
  std::chrono::milliseconds Left(std::chrono::milliseconds most) const;
  bool passed() const { return bounded() && Clock::now() >= *at_; }

 private:
  Deadline() = default;
  Deadline(Clock::time_point at, std::chrono::milliseconds limit) : at_(at), limit_(limit) {}

  std::optional<Clock::time_point> at_;
  std::chrono::milliseconds limit_{0};
};

// libpq's messages on one line. They end in a newline and sometimes go on over more lines
// ("…failed: Connection refused\n\tIs the server running…?"): each line break or tab, with
// the blanks around it, becomes one space; spaces within a line stay (the server's
// "FATAL:  password…" keeps its two); blanks at either end go.
std::string OneLine(std::string_view text);

// The connection's last error (PQerrorMessage) on one line; "out of memory" for a null one.
std::string ConnectionError(const pg_conn* conn);

// A connection string's keywords and values as it gives them, in libpq's order (libpq's
// defaults not filled in).
using ConnParams = std::vector<std::pair<std::string, std::string>>;

// Parses a libpq connection string in either form ("postgresql://user:pw@host:port/db?…"
// or "host=… dbname=…"). The error (InvalidArgument) is libpq's reason alone, such as
// `invalid connection option "colour"`: the caller says what it was doing.
Result<ConnParams> ParseConnString(std::string_view conninfo);

// The value of `key` in `params`; nullptr when the string does not set it.
const std::string* FindParam(const ConnParams& params, std::string_view key);

// `params` as a key=value connection string that ParseConnString reads back the same: every
// value in single quotes, with ' and \ escaped by a backslash.
std::string FormatConnString(const ConnParams& params);

struct ConnectOptions {
  // replication=database: a walsender connection, which takes the replication commands
  // (IDENTIFY_SYSTEM, CREATE_REPLICATION_SLOT, START_REPLICATION) and SQL. A `replication`
  // key in the params is ignored either way. Default off.
  bool replication = false;
  // application_name (pg_stat_activity shows it) unless the params set one; none when
  // empty. Default none.
  std::string application_name;
  // Bound on establishing the connection (TCP, TLS, authentication), whatever the
  // params' connect_timeout says. Default 10 s.
  std::chrono::milliseconds timeout{10'000};
};

// Whether a command or a connection that the server refused with `sqlstate` may succeed
// when tried again later, unchanged: the classes 08 (connection exception), 40 (transaction
// rollback: a deadlock, a serialization failure), 53 (insufficient resources: too many
// connections, out of memory, disk full), 57 (operator intervention: the server starting up,
// shutting down or restarting, a cancelled statement) and 58 (system error: I/O). Every
// other class needs something fixed first (authentication 28, a missing database 3D000,
// privileges 42501, …).
bool TransientSqlState(std::string_view sqlstate);

// Why Connect failed, for the caller's message.
struct ConnectFailure {
  std::string reason;    // libpq's message on one line, or "no connection within N ms"
  std::string database;  // whom libpq tried (its defaults filled in); empty when unknown
  std::string user;
  // Trying again later, unchanged, may succeed: the server was not reached (the connection
  // refused, no socket file, a network error, no answer in time, a temporary failure of
  // name resolution) or could not take the connection now (TransientSqlState: starting up,
  // shutting down, too many connections). False for what must be fixed first: the
  // connection string's values, authentication, a missing role or database, privileges,
  // TLS, a host name that does not exist.
  bool transient = false;

  // `attempt` followed by the database and user tried and the reason:
  // `cannot connect to database "db" as user "u": <reason>`.
  std::string Describe(std::string_view attempt) const;
  // Describe(attempt) as an error: kUnavailable when transient, else kInvalidArgument.
  Error ToError(std::string_view attempt) const;
};

// libpq's message about a failed connection as Connect asks for it (PQERRORS_VERBOSE: each
// refusal of the server carries its SQLSTATE, `FATAL:  28P01: password …`, and is followed
// by a `LOCATION:` line) read into ConnectFailure's reason and transient: the message libpq
// gives by default, on one line, and whether any attempt (one per host) failed transiently.
// libpq's own texts are read in English: tally never sets a locale, so libpq does not
// translate them; the server's may be in any language, hence the SQLSTATE. Connect's own;
// declared here for its tests.
ConnectFailure ReadConnectFailure(std::string_view verbose_message);

// Connects with `params` (ParseConnString) without blocking past options.timeout.
tl::expected<PgConn, ConnectFailure> Connect(const ConnParams& params,
                                             const ConnectOptions& options);

// What WaitSocket saw.
struct SocketWait {
  bool timed_out = false;  // the deadline passed first
  bool readable = false;   // input, or a hang-up or error that PQconsumeInput will report
  bool writable = false;
};

// Waits until the socket of `conn` is readable (when `read`) or writable (when `write`), or
// `deadline` passes. An error (IOError) when the connection has no socket or poll fails.
Result<SocketWait> WaitSocket(pg_conn* conn, bool read, bool write, const Deadline& deadline);

// Sends one command and flushes it: `sql` alone through the simple query protocol (the only
// one a replication connection takes; it may hold several statements), or with `params`
// ($1, $2, … as text) through the extended protocol. REQUIRES: no command in flight.
// Errors: "<what> failed: <reason>" (Unavailable when the connection is lost, else IOError),
// "<what>: no answer within N ms" (Unavailable).
Status Send(pg_conn* conn, const std::string& sql, const std::vector<std::string>& params,
            const Deadline& deadline, std::string_view what);

// The next result of the command in flight, once it is whole; a null PgResult when the
// command has no more. Errors as Send's.
Result<PgResult> NextResult(pg_conn* conn, const Deadline& deadline, std::string_view what);

// Send, then every result of the command: returns its last (COMMAND_OK or TUPLES_OK), or a
// COPY_BOTH result at once (START_REPLICATION: the stream follows). When a statement fails,
// the error is "<what> failed: <the server's message>", once every result has been read, so
// the connection takes the next command: Unavailable when its SQLSTATE is transient
// (TransientSqlState) or the connection is lost, else IOError. Errors as Send's otherwise.
Result<PgResult> Exec(pg_conn* conn, const std::string& sql, const std::vector<std::string>& params,
                      const Deadline& deadline, std::string_view what);

// Begins a REPEATABLE READ READ ONLY transaction on `conn` that sees exactly the exported
// snapshot `snapshot` (CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT): its queries see the rows
// as of the slot's consistent point. The exporting connection must not have run another
// command since. Errors as Exec's.
Status BeginSnapshotTransaction(pg_conn* conn, std::string_view snapshot, const Deadline& deadline);

// `name` as an SQL identifier (PQescapeIdentifier): always in double quotes, an inner "
// doubled ("posts", "Mixed", "a""b"). An error (InvalidArgument) when libpq refuses it (a
// byte sequence invalid in the connection's encoding).
Result<std::string> QuoteIdentifier(pg_conn* conn, std::string_view name);

// The text of a value of `result`; empty for NULL.
std::string Text(const pg_result* result, int row, int column);

// A value of `result` read as an unsigned decimal integer no larger than `max` (a count, an
// oid). An error (Corruption) naming the text when it is not one.
Result<uint64_t> UnsignedValue(const pg_result* result, int row, int column,
                               uint64_t max = UINT64_MAX);

}  // namespace tally::postgres
