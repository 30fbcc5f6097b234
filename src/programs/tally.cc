// tally: the command-line tool. One subcommand so far:
//
//   tally verify --source 'postgresql://…' [--server 127.0.0.1:6380] [--password p]
//                [--repair] [--timeout 60] [--progress] [counter ...]
//
// compares every derived counter of a running tallyd (or the ones named) with its
// definition's SELECT run on the PostgreSQL source, exactly, at one source position, while
// both keep working:
//
//   1. A TEMPORARY logical slot is created with an exported snapshot on a replication
//      connection: consistent point C, snapshot S. (ReplicationStream::CreateSlot makes
//      permanent slots only, so this file speaks the walsender command itself.) The slot
//      disappears with the connection, which stays idle until the end so that S stays
//      importable.
//   2. tallyd is told to hold at C (COUNTER.HOLD C): transactions above C wait; once
//      everything up to C is applied the hold is *reached*. To leave tallyd no time to
//      run past C before the hold lands, a first hold is set at the server's WAL position
//      before the slot is created, then exchanged for C (RELEASE and HOLD C pipelined in
//      one write).
//   3. On a regular connection, BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET
//      TRANSACTION SNAPSHOT 'S' (with TimeZone UTC and DateStyle ISO): every counter's
//      SELECT (the definition's own, valid PostgreSQL) sees the rows exactly as of C.
//   4. tallyd's groups are read with COUNTER.SCAN while the hold stands and compared
//      with the SELECT's rows, keyed as tally keys them (definitions::EncodeKey over the
//      rows parsed by pg_types' ParsePgText); groups of value 0 or NULL are absent on
//      both sides. A counter with a retention (WITH (retention = ...)) is compared on its
//      groups within retention only: those whose time bucket has expired by tallyd's clock
//      (TIME, read after both sides) are left out on both sides, as tallyd removes them and
//      skips late changes to them while the source keeps their rows.
//   5. With --repair, COUNTER.REPAIR sets every differing group to the source's value
//      (batches of 1000 groups, each one atomic commit), still held; then the counter is
//      read again and must be equal.
//   6. COUNTER.RELEASE, always: also on errors and on SIGINT/SIGTERM/SIGHUP (a signal
//      thread releases the hold on a connection of its own, then exits).
//
// Output (stdout): one line per difference, "<key>: tally <X>, source <Y>" (a group
// missing on one side reads 0 there), one summary line per counter, and a last line.
// Progress (stderr, when stderr is a terminal or with --progress): rows read from the
// source and groups read from tally out of the counter's group count.
// Exit status: 0 all equal (or repaired), 1 differences found and not repaired, 2 error.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <libpq-fe.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/version.h"
#include "engine/definitions/compiler.h"
#include "engine/definitions/lexer.h"
#include "engine/definitions/parser.h"
#include "engine/definitions/time_util.h"
#include "engine/definitions/value.h"
#include "sources/postgres/pg_types.h"
#include "sources/postgres/pgoutput.h"

namespace {

namespace pg = tally::postgres;
namespace defs = tally::definitions;
using Clock = std::chrono::steady_clock;

// Any error of the run: the message is printed as "tally verify: <message>", exit 2.
struct Failure {
  std::string message;
};

[[noreturn]] void Fail(std::string message) { throw Failure{std::move(message)}; }

// libpq's multi-line messages on one line: runs of whitespace become one space.
std::string OneLine(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const bool space = c == '\n' || c == '\t' || c == ' ' || c == '\r';
    if (!space) {
      out.push_back(c);
    } else if (!out.empty() && out.back() != ' ') {
      out.push_back(' ');
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string Thousands(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string Plural(uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", Thousands(n), n == 1 ? one : many);
}

// ---- A small blocking RESP client ------------------------------------------------------

struct Reply {
  enum class Kind { kSimple, kError, kInteger, kBulk, kNil, kArray } kind = Kind::kNil;
  std::string text;  // simple, error, bulk
  int64_t integer = 0;
  std::vector<Reply> items;

  bool is_error() const { return kind == Kind::kError; }
  // An integer reply, or a bulk/simple string that holds one.
  std::optional<int64_t> AsInteger() const {
    if (kind == Kind::kInteger) return integer;
    if (kind != Kind::kBulk && kind != Kind::kSimple) return std::nullopt;
    int64_t value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
    return value;
  }
  std::string Describe() const {
    switch (kind) {
      case Kind::kSimple:
        return text;
      case Kind::kError:
        return "error " + text;
      case Kind::kInteger:
        return std::to_string(integer);
      case Kind::kBulk:
        return "\"" + text.substr(0, 80) + "\"";
      case Kind::kNil:
        return "nil";
      case Kind::kArray:
        return fmt::format("an array of {}", items.size());
    }
    return "?";
  }
};

class RespClient {
 public:
  RespClient() = default;
  ~RespClient() { Close(); }
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;

  // Connects to "host:port" within `timeout`; every later read or write waits at most
  // `io_timeout`. Authenticates when `password` is not empty.
  void Connect(const std::string& address, const std::string& password,
               std::chrono::milliseconds timeout, std::chrono::milliseconds io_timeout) {
    address_ = address;
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
      Fail(fmt::format("--server '{}' must be host:port", address));
    }
    std::string host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    const std::string port = address.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      Fail(fmt::format("cannot resolve tallyd address {}: {}", address, gai_strerror(rc)));
    }
    std::string last_error = "no address";
    for (addrinfo* ai = found; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
      const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      const int flags = fcntl(fd, F_GETFL, 0);
      fcntl(fd, F_SETFL, flags | O_NONBLOCK);
      int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        rc = poll(&p, 1, static_cast<int>(timeout.count()));
        if (rc == 0) {
          last_error = "timed out";
          close(fd);
          continue;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc != 0) {
        last_error = std::strerror(errno);
        close(fd);
        continue;
      }
      fcntl(fd, F_SETFL, flags);
      timeval tv{};
      tv.tv_sec = io_timeout.count() / 1000;
      tv.tv_usec = (io_timeout.count() % 1000) * 1000;
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fd_ = fd;
    }
    freeaddrinfo(found);
    if (fd_ < 0) Fail(fmt::format("cannot connect to tallyd at {}: {}", address, last_error));
    if (!password.empty()) {
      Reply auth = Call({"AUTH", password});
      if (auth.is_error()) Fail(fmt::format("tallyd at {}: AUTH: {}", address, auth.text));
    }
  }

  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    in_.clear();
    pos_ = 0;
  }

  // Sends several commands in one write, then reads their replies in order.
  std::vector<Reply> Pipeline(const std::vector<std::vector<std::string>>& commands) {
    std::string out;
    for (const auto& args : commands) {
      out += fmt::format("*{}\r\n", args.size());
      for (const std::string& a : args) {
        out += fmt::format("${}\r\n", a.size());
        out += a;
        out += "\r\n";
      }
    }
    size_t sent = 0;
    while (sent < out.size()) {
      const ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        Broken(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? "send timed out"
                                                                  : std::strerror(errno));
      sent += static_cast<size_t>(n);
    }
    std::vector<Reply> replies;
    for (size_t i = 0; i < commands.size(); ++i) replies.push_back(ReadReply());
    return replies;
  }

  Reply Call(const std::vector<std::string>& args) { return std::move(Pipeline({args})[0]); }

  // Call, with an error reply turned into a Failure naming the command.
  Reply Check(const std::vector<std::string>& args) {
    Reply reply = Call(args);
    if (reply.is_error()) Fail(fmt::format("tallyd: {}: {}", args[0], reply.text));
    return reply;
  }

 private:
  [[noreturn]] void Broken(const std::string& why) {
    Close();
    Fail(fmt::format("connection to tallyd at {} lost: {}", address_, why));
  }

  void Fill() {
    if (pos_ > 0 && pos_ == in_.size()) {
      in_.clear();
      pos_ = 0;
    }
    char buffer[65536];
    for (;;) {
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) Broken("closed by the server");
      if (n < 0)
        Broken(errno == EAGAIN || errno == EWOULDBLOCK ? "no reply in time" : std::strerror(errno));
      in_.append(buffer, static_cast<size_t>(n));
      return;
    }
  }

  std::string ReadLine() {
    for (;;) {
      const size_t end = in_.find("\r\n", pos_);
      if (end != std::string::npos) {
        std::string line = in_.substr(pos_, end - pos_);
        pos_ = end + 2;
        return line;
      }
      Fill();
    }
  }

  int64_t ParseLength(const std::string& line) {
    int64_t n = 0;
    auto [ptr, ec] = std::from_chars(line.data() + 1, line.data() + line.size(), n);
    if (ec != std::errc() || ptr != line.data() + line.size()) Broken("bad reply '" + line + "'");
    return n;
  }

  Reply ReadReply() {
    const std::string line = ReadLine();
    if (line.empty()) Broken("an empty reply line");
    Reply r;
    switch (line[0]) {
      case '+':
        r.kind = Reply::Kind::kSimple;
        r.text = line.substr(1);
        return r;
      case '-':
        r.kind = Reply::Kind::kError;
        r.text = line.substr(1);
        return r;
      case ':':
        r.kind = Reply::Kind::kInteger;
        r.integer = ParseLength(line);
        return r;
      case '_':
        return r;
      case '$': {
        const int64_t n = ParseLength(line);
        if (n < 0) return r;
        while (in_.size() - pos_ < static_cast<size_t>(n) + 2) Fill();
        r.kind = Reply::Kind::kBulk;
        r.text = in_.substr(pos_, static_cast<size_t>(n));
        pos_ += static_cast<size_t>(n) + 2;
        return r;
      }
      case '*':
      case '%': {
        int64_t n = ParseLength(line);
        if (n < 0) return r;
        if (line[0] == '%') n *= 2;
        r.kind = Reply::Kind::kArray;
        r.items.reserve(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) r.items.push_back(ReadReply());
        return r;
      }
      default:
        Broken("unexpected reply '" + line.substr(0, 40) + "'");
    }
  }

  std::string address_;
  int fd_ = -1;
  std::string in_;
  size_t pos_ = 0;
};

// ---- The hold, released whatever happens ----------------------------------------------

// What the signal thread needs to release the hold on its own connection.
struct HoldRegistry {
  std::mutex mutex;
  bool ours = false;  // a hold we set may be in place
  std::string server;
  std::string password;
};
HoldRegistry g_hold;

void ReleaseOnFreshConnection() {
  RespClient client;
  client.Connect(g_hold.server, g_hold.password, std::chrono::milliseconds(3000),
                 std::chrono::milliseconds(3000));
  client.Check({"COUNTER.RELEASE"});
}

void SignalThread(sigset_t set) {
  int sig = 0;
  if (sigwait(&set, &sig) != 0) return;
  std::string note;
  {
    std::lock_guard lock(g_hold.mutex);
    if (g_hold.ours) {
      try {
        ReleaseOnFreshConnection();
        g_hold.ours = false;
        note = "; the hold was released";
      } catch (const Failure& f) {
        note = "; releasing the hold failed: " + f.message + " (send COUNTER.RELEASE)";
      }
    }
  }
  std::fflush(stdout);
  fmt::print(stderr, "\ntally verify: interrupted by {}{}\n",
             sig == SIGINT    ? "SIGINT"
             : sig == SIGTERM ? "SIGTERM"
                              : "SIGHUP",
             note);
  std::fflush(stderr);
  _exit(2);  // the temporary slot goes with the connection
}

// ---- PostgreSQL ------------------------------------------------------------------------

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, PgConnDeleter>;
struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

// Connects to `conninfo` (URI or key=value), for replication when `replication`.
PgConn ConnectPg(const std::string& conninfo, bool replication) {
  // Later entries override earlier ones, and dbname is expanded in place: the defaults
  // come before it (the connection string may override them), replication after it.
  std::vector<const char*> keys = {"application_name", "connect_timeout", "dbname"};
  std::vector<const char*> values = {"tally verify", "10", conninfo.c_str()};
  if (replication) {
    keys.push_back("replication");
    values.push_back("database");
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PgConn conn(PQconnectdbParams(keys.data(), values.data(), 1));
  if (conn == nullptr) Fail("cannot connect to PostgreSQL: out of memory");
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    Fail("cannot connect to PostgreSQL: " + OneLine(PQerrorMessage(conn.get())));
  }
  return conn;
}

// Waits until `conn` has a whole result (or none is pending), at most until `deadline`
// (none when nullopt); on timeout the query is cancelled and `what` named.
void AwaitResult(PGconn* conn, std::optional<Clock::time_point> deadline, const std::string& what) {
  while (PQisBusy(conn)) {
    int wait_ms = 1000;
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) {
        if (PGcancel* cancel = PQgetCancel(conn)) {
          char buffer[256];
          PQcancel(cancel, buffer, sizeof(buffer));
          PQfreeCancel(cancel);
        }
        Fail(fmt::format("PostgreSQL: {} did not finish in time", what));
      }
      wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1000));
    }
    pollfd p{PQsocket(conn), POLLIN, 0};
    if (poll(&p, 1, wait_ms) < 0 && errno != EINTR)
      Fail("poll: " + std::string(std::strerror(errno)));
    if (!PQconsumeInput(conn)) Fail("PostgreSQL: " + what + ": " + OneLine(PQerrorMessage(conn)));
  }
}

// Runs one command; its single result must have `expected` status.
PgResult Exec(PGconn* conn, const std::string& sql, ExecStatusType expected,
              std::optional<Clock::time_point> deadline = std::nullopt,
              const std::string& what = "") {
  const std::string name = what.empty() ? sql : what;
  if (!PQsendQuery(conn, sql.c_str()))
    Fail("PostgreSQL: " + name + ": " + OneLine(PQerrorMessage(conn)));
  PgResult first;
  PgResult failed;  // the first result of another status
  for (;;) {
    AwaitResult(conn, deadline, name);
    PgResult r(PQgetResult(conn));
    if (r == nullptr) break;
    if (PQresultStatus(r.get()) != expected) {
      if (failed == nullptr) failed = std::move(r);
    } else if (first == nullptr) {
      first = std::move(r);
    }
  }
  if (failed != nullptr || first == nullptr) {
    Fail("PostgreSQL: " + name + ": " +
         OneLine(failed ? PQresultErrorMessage(failed.get()) : PQerrorMessage(conn)));
  }
  return first;
}

// ---- Counters --------------------------------------------------------------------------

struct Counter {
  std::string name;
  std::string source;
  std::string select;  // the definition's SELECT
  int64_t groups = 0;  // as COUNTER.LIST saw them
  // "counting", or "pending" / "backfilling": its groups are not whole yet (COUNTER.LIST's
  // "state"; counting when tallyd does not say).
  std::string state = "counting";
  // The definition compiled here: its SELECT, and its retention when it has one.
  std::shared_ptr<const defs::CompiledCounter> compiled;
};

// The schemas of tallyd's sources (SHOW SOURCES), to compile its counters' definitions.
std::vector<defs::SourceSchema> ListSources(RespClient& tally) {
  const Reply reply = tally.Check({"COUNTER.DEFINE", "SHOW SOURCES"});
  if (reply.kind != Reply::Kind::kArray) Fail("tallyd: SHOW SOURCES answered " + reply.Describe());
  std::vector<defs::SourceSchema> sources;
  for (const Reply& item : reply.items) {
    auto statement = defs::ParseStatement(item.text);
    const auto* create = statement ? std::get_if<defs::CreateSource>(&*statement) : nullptr;
    auto schema =
        create != nullptr ? defs::CompileSource(*create) : tally::Result<defs::SourceSchema>();
    if (create == nullptr || !schema) {
      Fail(fmt::format("tallyd: SHOW SOURCES: unexpected source '{}'", item.text));
    }
    sources.push_back(std::move(*schema));
  }
  return sources;
}

std::vector<Counter> ListCounters(RespClient& tally) {
  const std::vector<defs::SourceSchema> sources = ListSources(tally);
  const defs::Catalog catalog = [&](std::string_view name) -> const defs::SourceSchema* {
    const auto it = std::ranges::find(sources, name, &defs::SourceSchema::name);
    return it == sources.end() ? nullptr : &*it;
  };
  const Reply reply = tally.Check({"COUNTER.LIST"});
  if (reply.kind != Reply::Kind::kArray) Fail("tallyd: COUNTER.LIST answered " + reply.Describe());
  std::vector<Counter> counters;
  for (const Reply& item : reply.items) {
    if (item.kind != Reply::Kind::kArray || item.items.size() % 2 != 0) {
      Fail("tallyd: COUNTER.LIST: unexpected entry " + item.Describe());
    }
    Counter c;
    std::string sql;
    for (size_t i = 0; i + 1 < item.items.size(); i += 2) {
      const std::string& field = item.items[i].text;
      const Reply& value = item.items[i + 1];
      if (field == "name") c.name = value.text;
      if (field == "source") c.source = value.text;
      if (field == "sql") sql = value.text;
      if (field == "groups") c.groups = value.AsInteger().value_or(0);
      if (field == "state") c.state = value.text;
    }
    // The normalised CREATE COUNTER, compiled as tallyd compiled it: its sql() is the SELECT
    // to run on the source (without the WITH options).
    auto compiled = defs::CompileSql(sql, catalog);
    if (!compiled || compiled->name() != c.name) {
      Fail(fmt::format("tallyd: counter {}: unexpected SQL '{}'{}", c.name, sql,
                       compiled ? "" : ": " + compiled.error().message));
    }
    c.select = compiled->sql();
    c.compiled = std::make_shared<const defs::CompiledCounter>(std::move(*compiled));
    counters.push_back(std::move(c));
  }
  return counters;
}

using Groups = std::unordered_map<std::string, int64_t>;

// Progress on stderr: rows read from the source, then groups read from tally out of the
// counter's group count. At most ten updates a second; a final line per counter.
class Progress {
 public:
  Progress(bool enabled, std::string counter, int64_t expected_groups)
      : enabled_(enabled), counter_(std::move(counter)), total_(expected_groups) {}
  ~Progress() { Finish(); }

  void SourceRows(uint64_t n) {
    source_rows_ = n;
    Draw(false);
  }
  void TallyGroups(uint64_t n) {
    tally_groups_ = n;
    in_tally_ = true;
    Draw(false);
  }
  void Finish() {
    if (!shown_) return;
    Draw(true);
    std::fputc('\n', stderr);
    std::fflush(stderr);
    shown_ = false;
    enabled_ = false;
  }

 private:
  void Draw(bool force) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!force && shown_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    shown_ = true;
    std::string line = fmt::format("\r{}: source {} rows", counter_, Thousands(source_rows_));
    if (in_tally_) {
      const uint64_t total =
          std::max<uint64_t>(static_cast<uint64_t>(std::max<int64_t>(total_, 0)), tally_groups_);
      const int width = 30;
      const int filled = total == 0 ? width : static_cast<int>(width * tally_groups_ / total);
      line +=
          fmt::format(", tally {}/{} groups [{}{}] {}%", Thousands(tally_groups_), Thousands(total),
                      std::string(filled, '#'), std::string(width - filled, '.'),
                      total == 0 ? 100 : 100 * tally_groups_ / total);
    }
    line += "   ";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }

  bool enabled_;
  bool shown_ = false;
  std::string counter_;
  int64_t total_;
  uint64_t source_rows_ = 0;
  uint64_t tally_groups_ = 0;
  bool in_tally_ = false;
  Clock::time_point last_{};
};

// The groups the counter's SELECT gives inside the snapshot transaction, keyed as tally
// keys them. Rows come one at a time (single-row mode), so a large family is never held
// twice.
Groups SourceGroups(PGconn* conn, const Counter& counter, Progress& progress) {
  const std::string what = "counter " + counter.name + ": " + counter.select;
  if (!PQsendQuery(conn, counter.select.c_str()))
    Fail("PostgreSQL: " + what + ": " + OneLine(PQerrorMessage(conn)));
  PQsetSingleRowMode(conn);
  Groups groups;
  uint64_t rows = 0;
  std::string failure;
  std::vector<defs::Value> parts;
  for (;;) {
    AwaitResult(conn, std::nullopt, what);
    PgResult r(PQgetResult(conn));
    if (r == nullptr) break;
    const ExecStatusType status = PQresultStatus(r.get());
    if (status == PGRES_TUPLES_OK) continue;  // the end of the rows
    if (status != PGRES_SINGLE_TUPLE) {
      if (failure.empty())
        failure = "PostgreSQL: " + what + ": " + OneLine(PQresultErrorMessage(r.get()));
      continue;
    }
    if (!failure.empty()) continue;
    const int fields = PQnfields(r.get());
    if (fields < 1) {
      failure = "counter " + counter.name + ": its SELECT returned no columns";
      continue;
    }
    parts.clear();
    for (int f = 0; f < fields; ++f) {
      const Oid type = PQftype(r.get(), f);
      if (f + 1 < fields && !pg::TallyTypeForPg(type) && !PQgetisnull(r.get(), 0, f)) {
        failure = fmt::format(
            "counter {}: key column {} ({}) has PostgreSQL type {}, which tally "
            "does not read",
            counter.name, f + 1, PQfname(r.get(), f), pg::PgTypeName(type));
        break;
      }
      if (PQgetisnull(r.get(), 0, f)) {
        parts.push_back(defs::Value::Null());
        continue;
      }
      const std::string_view text(PQgetvalue(r.get(), 0, f),
                                  static_cast<size_t>(PQgetlength(r.get(), 0, f)));
      auto value = pg::ParsePgText(type, text);
      if (!value || (f + 1 == fields && value->type != defs::Type::kInt64)) {
        failure = fmt::format("counter {}: column {} ({}) = '{}': {}", counter.name, f + 1,
                              PQfname(r.get(), f), text.substr(0, 80),
                              value ? "the value is not an integer" : value.error().message);
        break;
      }
      parts.push_back(*value);
    }
    if (!failure.empty()) continue;
    ++rows;
    if ((rows & 1023) == 0) progress.SourceRows(rows);
    const defs::Value& value = parts.back();
    if (value.is_null() || value.i == 0) continue;  // tally keeps no zero group
    std::string key = defs::EncodeKey(counter.name, std::span(parts.data(), parts.size() - 1));
    auto [it, inserted] = groups.emplace(std::move(key), value.i);
    if (!inserted) {
      failure = fmt::format("counter {}: its SELECT returned the group {} twice", counter.name,
                            it->first);
    }
  }
  progress.SourceRows(rows);
  if (!failure.empty()) Fail(failure);
  return groups;
}

Groups TallyGroups(RespClient& tally, const Counter& counter, Progress& progress) {
  Groups groups;
  std::string cursor = "0";
  for (uint64_t calls = 0;; ++calls) {
    const Reply reply = tally.Check({"COUNTER.SCAN", counter.name, cursor, "10000"});
    if (reply.kind != Reply::Kind::kArray || reply.items.size() != 2 ||
        reply.items[1].kind != Reply::Kind::kArray || reply.items[1].items.size() % 2 != 0) {
      Fail("tallyd: COUNTER.SCAN " + counter.name + " answered " + reply.Describe());
    }
    const auto& flat = reply.items[1].items;
    for (size_t i = 0; i + 1 < flat.size(); i += 2) {
      const std::optional<int64_t> value = flat[i + 1].AsInteger();
      if (!value)
        Fail("tallyd: COUNTER.SCAN " + counter.name + ": a value " + flat[i + 1].Describe());
      groups[flat[i].text] = *value;
    }
    progress.TallyGroups(groups.size());
    cursor = reply.items[0].text;
    if (reply.items[0].kind == Reply::Kind::kInteger)
      cursor = std::to_string(reply.items[0].integer);
    if (cursor == "0") break;
    if (calls > 100'000'000) Fail("tallyd: COUNTER.SCAN " + counter.name + " does not end");
  }
  return groups;
}

// tallyd's clock (TIME), in microseconds: the clock its retention follows.
int64_t ServerMicros(RespClient& tally) {
  const Reply reply = tally.Check({"TIME"});
  if (reply.kind != Reply::Kind::kArray || reply.items.size() != 2 || !reply.items[0].AsInteger() ||
      !reply.items[1].AsInteger()) {
    Fail("tallyd: TIME answered " + reply.Describe());
  }
  return *reply.items[0].AsInteger() * 1'000'000 + *reply.items[1].AsInteger();
}

// Drops the groups of a counter with a retention whose time bucket is past it at
// `now_micros`: tallyd removes those groups and skips late changes to them, while the source
// keeps their rows. Expiry only grows with time, so with `now_micros` read after both sides
// were, every group kept here was within retention all along and is compared exactly.
// Returns how many groups it dropped.
size_t DropExpired(const defs::CompiledCounter& counter, int64_t now_micros, Groups& groups) {
  if (!counter.retention()) return 0;
  return std::erase_if(
      groups, [&](const auto& group) { return counter.KeyExpired(group.first, now_micros); });
}

struct Difference {
  std::string key;
  int64_t tally = 0;
  int64_t source = 0;
};

std::vector<Difference> Compare(const Groups& tally, const Groups& source) {
  std::vector<Difference> out;
  for (const auto& [key, value] : tally) {
    const auto it = source.find(key);
    const int64_t want = it == source.end() ? 0 : it->second;
    if (want != value) out.push_back({key, value, want});
  }
  for (const auto& [key, value] : source) {
    if (!tally.contains(key)) out.push_back({key, 0, value});
  }
  std::ranges::sort(out, {}, &Difference::key);
  return out;
}

// The hold state as [held, position, reached].
struct HoldReport {
  bool held = false;
  std::string position;
  bool reached = false;
};

HoldReport ReadHold(RespClient& tally) {
  const Reply reply = tally.Check({"COUNTER.HOLD"});
  if (reply.kind != Reply::Kind::kArray || reply.items.size() != 3) {
    Fail("tallyd: COUNTER.HOLD answered " + reply.Describe());
  }
  return {reply.items[0].AsInteger().value_or(0) != 0, reply.items[1].text,
          reply.items[2].AsInteger().value_or(0) != 0};
}

bool SameLsn(const std::string& a, tally::Lsn b) {
  auto parsed = tally::ParseLsn(a);
  return parsed && *parsed == b;
}

// Sets the hold at `lsn` (the registry says it is ours only once tallyd said OK).
void SetHold(RespClient& tally, tally::Lsn lsn) {
  std::lock_guard lock(g_hold.mutex);
  const Reply reply = tally.Call({"COUNTER.HOLD", tally::FormatLsn(lsn)});
  if (reply.is_error()) Fail("tallyd: COUNTER.HOLD " + tally::FormatLsn(lsn) + ": " + reply.text);
  g_hold.ours = true;
}

// Exchanges our hold for one at `lsn`, in one write (tallyd runs both in one turn).
void MoveHold(RespClient& tally, tally::Lsn lsn) {
  std::lock_guard lock(g_hold.mutex);
  auto replies = tally.Pipeline({{"COUNTER.RELEASE"}, {"COUNTER.HOLD", tally::FormatLsn(lsn)}});
  g_hold.ours = false;
  if (replies[0].is_error()) Fail("tallyd: COUNTER.RELEASE: " + replies[0].text);
  if (replies[1].is_error())
    Fail("tallyd: COUNTER.HOLD " + tally::FormatLsn(lsn) + ": " + replies[1].text);
  g_hold.ours = true;
}

void ReleaseHold(RespClient* tally) {
  std::lock_guard lock(g_hold.mutex);
  if (!g_hold.ours) return;
  try {
    if (tally != nullptr) {
      tally->Check({"COUNTER.RELEASE"});
    } else {
      ReleaseOnFreshConnection();
    }
    g_hold.ours = false;
  } catch (const Failure&) {
    if (tally == nullptr) throw;
    // The main connection broke: try once more on a new one.
    ReleaseOnFreshConnection();
    g_hold.ours = false;
  }
}

struct VerifyOptions {
  std::string source;
  std::string server = "127.0.0.1:6380";
  std::string password;
  bool repair = false;
  double timeout = 60;
  bool progress = false;
  std::vector<std::string> counters;
};

constexpr int kMostAttempts = 5;
// verify's exit status when nothing differs but some counters were not compared (pending or
// being backfilled). 0 equal, 1 differences, 2 an error.
constexpr int kExitNotCompared = 3;

// The source at one position: a transaction on `sql` that sees the rows exactly as of the
// consistent point `at` of a temporary slot (whose connection `repl` must stay open and
// idle), and tallyd held there with everything up to `at` applied.
struct Snapshot {
  PgConn sql;
  PgConn repl;
  tally::Lsn at = 0;
};

// Creates the slot, holds tallyd at its consistent point and waits until the hold is
// reached. nullopt (the hold released) when tallyd turns out to have applied something past
// the consistent point before the hold landed: try again.
std::optional<Snapshot> HoldAtSnapshot(RespClient& tally, const VerifyOptions& options,
                                       const std::vector<std::string>& sources,
                                       std::chrono::milliseconds timeout) {
  // The two PostgreSQL connections; the SQL one reads in UTC with ISO dates.
  Snapshot snap;
  snap.sql = ConnectPg(options.source, false);
  PGconn* const sql = snap.sql.get();
  Exec(sql, "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres'",
       PGRES_COMMAND_OK);
  snap.repl = ConnectPg(options.source, true);
  const tally::Lsn before = [&] {
    PgResult r = Exec(sql, "SELECT pg_current_wal_lsn()::text", PGRES_TUPLES_OK);
    auto lsn = tally::ParseLsn(PQgetvalue(r.get(), 0, 0));
    if (!lsn) Fail("PostgreSQL: pg_current_wal_lsn(): " + lsn.error().message);
    return *lsn;
  }();

  // A first hold at the WAL position now: tallyd cannot run far past the consistent point
  // while the slot is being created.
  SetHold(tally, before);
  std::mt19937_64 rng(std::random_device{}());
  const std::string slot = fmt::format("tally_verify_{}_{:x}", getpid(), rng() & 0xffffff);
  PgResult created =
      Exec(snap.repl.get(),
           "CREATE_REPLICATION_SLOT " + slot + " TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT",
           PGRES_TUPLES_OK, Clock::now() + timeout, "CREATE_REPLICATION_SLOT (temporary)");
  if (PQnfields(created.get()) < 3 || PQntuples(created.get()) != 1) {
    Fail("PostgreSQL: CREATE_REPLICATION_SLOT: unexpected result");
  }
  auto consistent = tally::ParseLsn(PQgetvalue(created.get(), 0, 1));
  if (!consistent) Fail("PostgreSQL: CREATE_REPLICATION_SLOT: " + consistent.error().message);
  const std::string snapshot = PQgetvalue(created.get(), 0, 2);
  const tally::Lsn at = snap.at = *consistent;
  if (at != before) MoveHold(tally, at);

  Exec(sql, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", PGRES_COMMAND_OK);
  Exec(sql, "SET TRANSACTION SNAPSHOT '" + snapshot + "'", PGRES_COMMAND_OK);

  // Wait until tallyd has applied everything up to the consistent point.
  const auto hold_deadline = Clock::now() + timeout;
  for (;;) {
    const HoldReport hold = ReadHold(tally);
    if (!hold.held || !SameLsn(hold.position, at)) {
      Fail(fmt::format(
          "the hold at {} was lifted by someone else (COUNTER.HOLD shows held {} at {})",
          tally::FormatLsn(at), hold.held ? 1 : 0, hold.position));
    }
    if (hold.reached) break;
    if (Clock::now() >= hold_deadline) {
      ReleaseHold(&tally);
      Fail(
          fmt::format("tallyd did not reach source position {} within {} s: is its PostgreSQL "
                      "source streaming? (see INFO; --timeout)",
                      tally::FormatLsn(at), options.timeout));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Each source's stored position says which transactions tallyd has applied (the last
  // one's commit; positions without changes stop at a hold). Above `at`, a transaction
  // after the snapshot slipped in before the hold landed.
  for (const std::string& source : sources) {
    const Reply reply = tally.Check({"GET", std::string("\0pos:", 5) + source});
    const int64_t position = reply.AsInteger().value_or(0);
    if (position > static_cast<int64_t>(at)) {
      fmt::print(stderr,
                 "tally verify: tallyd had applied {} of source {} past the snapshot's {}; "
                 "again with a new snapshot\n",
                 tally::FormatLsn(static_cast<tally::Lsn>(position)), source, tally::FormatLsn(at));
      ReleaseHold(&tally);
      return std::nullopt;
    }
  }
  return snap;
}

int Verify(const VerifyOptions& options) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout * 1000));
  const auto io_timeout = std::max(timeout, std::chrono::milliseconds(30'000));
  {
    std::lock_guard lock(g_hold.mutex);
    g_hold.server = options.server;
    g_hold.password = options.password;
  }
  RespClient tally;
  tally.Connect(options.server, options.password, std::chrono::milliseconds(5000), io_timeout);

  // Which counters.
  std::vector<Counter> all = ListCounters(tally);
  std::vector<Counter> chosen;
  if (options.counters.empty()) {
    chosen = all;
    if (chosen.empty()) Fail("tallyd at " + options.server + " has no counters to verify");
  } else {
    for (const std::string& name : options.counters) {
      auto it = std::ranges::find(all, name, &Counter::name);
      if (it == all.end()) {
        std::string names;
        for (const Counter& c : all) names += (names.empty() ? "" : ", ") + c.name;
        Fail(fmt::format("unknown counter '{}' (tallyd has: {})", name,
                         names.empty() ? "none" : names));
      }
      if (std::ranges::find(chosen, name, &Counter::name) == chosen.end()) chosen.push_back(*it);
    }
  }

  // Guarantees the hold is released however Verify ends.
  struct Guard {
    RespClient* tally;
    ~Guard() {
      try {
        ReleaseHold(tally);
      } catch (const Failure& f) {
        fmt::print(stderr, "tally verify: releasing the hold failed: {} (send COUNTER.RELEASE)\n",
                   f.message);
      }
    }
  } guard{&tally};
  std::vector<std::string> sources;
  for (const Counter& c : chosen) {
    if (std::ranges::find(sources, c.source) == sources.end()) sources.push_back(c.source);
  }
  std::optional<Snapshot> held;
  for (int attempt = 1; !held; ++attempt) {
    held = HoldAtSnapshot(tally, options, sources, timeout);
    if (!held && attempt == kMostAttempts) {
      Fail(
          fmt::format("tallyd ran past the snapshot's position before the hold landed, {} times "
                      "in a row",
                      kMostAttempts));
    }
  }
  PGconn* const sql = held->sql.get();
  const tally::Lsn at = held->at;
  fmt::print("tally verify: {} at source position {}\n",
             Plural(chosen.size(), "counter", "counters"), tally::FormatLsn(at));
  std::fflush(stdout);

  // Which counters are whole, read once the hold stands: a pending counter has no groups
  // and a backfilling one gets its snapshot's rows even under the hold, so comparing them
  // would report differences that are not drift. They are left out, and the exit status
  // says that verify could not vouch for them.
  const std::vector<Counter> listed = ListCounters(tally);
  const auto state_of = [&](const Counter& counter) -> std::string {
    const auto it = std::ranges::find(listed, counter.name, &Counter::name);
    return it == listed.end() ? "dropped" : it->state;
  };

  const bool progress_enabled = options.progress || isatty(STDERR_FILENO);
  uint64_t differing_counters = 0, differences = 0, repaired = 0, still_different = 0;
  uint64_t not_compared = 0;
  for (const Counter& counter : chosen) {
    if (const std::string state = state_of(counter); state != "counting") {
      ++not_compared;
      fmt::print("{}: {}, not compared\n", counter.name,
                 state == "pending"       ? "waiting for its backfill"
                 : state == "backfilling" ? "being backfilled"
                 : state == "dropped"     ? "dropped meanwhile"
                                          : "in state " + state);
      std::fflush(stdout);
      continue;
    }
    // A terminal gets a progress bar for large families only; --progress always.
    const bool show = options.progress || (progress_enabled && counter.groups >= 10'000);
    Progress progress(show, counter.name, counter.groups);
    Groups source = SourceGroups(sql, counter, progress);
    Groups mine = TallyGroups(tally, counter, progress);
    progress.Finish();
    if (counter.compiled->retention()) {
      const int64_t now = ServerMicros(tally);
      const size_t expired = DropExpired(*counter.compiled, now, source);
      DropExpired(*counter.compiled, now, mine);
      if (expired > 0) {
        fmt::print("{}: {} past its retention of {}, not compared\n", counter.name,
                   Plural(expired, "source group", "source groups"),
                   defs::RetentionText(*counter.compiled->retention()));
      }
    }
    std::vector<Difference> diffs = Compare(mine, source);
    for (const Difference& d : diffs) {
      fmt::print("{}: tally {}, source {}\n", d.key, d.tally, d.source);
    }
    if (diffs.empty()) {
      fmt::print("{}: equal ({})\n", counter.name, Plural(source.size(), "group", "groups"));
      std::fflush(stdout);
      continue;
    }
    ++differing_counters;
    differences += diffs.size();
    fmt::print("{}: {} ({} at the source, {} in tally)\n", counter.name,
               Plural(diffs.size(), "difference", "differences"), Thousands(source.size()),
               Thousands(mine.size()));
    std::fflush(stdout);
    if (!options.repair) continue;

    for (size_t begin = 0; begin < diffs.size(); begin += 1000) {
      std::vector<std::string> args = {"COUNTER.REPAIR", counter.name};
      for (size_t i = begin; i < std::min(diffs.size(), begin + 1000); ++i) {
        args.push_back(diffs[i].key);
        args.push_back(std::to_string(diffs[i].source));
      }
      tally.Check(args);
    }
    Progress again(show, counter.name, static_cast<int64_t>(source.size()));
    mine = TallyGroups(tally, counter, again);
    again.Finish();
    if (counter.compiled->retention()) {
      const int64_t now = ServerMicros(tally);
      DropExpired(*counter.compiled, now, source);
      DropExpired(*counter.compiled, now, mine);
    }
    const std::vector<Difference> left = Compare(mine, source);
    if (left.empty()) {
      repaired += diffs.size();
      fmt::print("{}: repaired {}, now equal\n", counter.name,
                 Plural(diffs.size(), "group", "groups"));
    } else {
      still_different += left.size();
      for (const Difference& d : left)
        fmt::print("{}: tally {}, source {}\n", d.key, d.tally, d.source);
      fmt::print("{}: still {} after the repair\n", counter.name,
                 Plural(left.size(), "difference", "differences"));
    }
    std::fflush(stdout);
  }

  // The comparison holds only if the hold stood throughout.
  const HoldReport hold = ReadHold(tally);
  if (!hold.held || !SameLsn(hold.position, at)) {
    Fail(
        fmt::format("the hold at {} was lifted during the comparison (COUNTER.HOLD shows held {} "
                    "at {}): the result above is not reliable",
                    tally::FormatLsn(at), hold.held ? 1 : 0, hold.position));
  }
  ReleaseHold(&tally);
  Exec(sql, "COMMIT", PGRES_COMMAND_OK);

  // Exit 3 when nothing differs but some counters could not be compared.
  const std::string skipped =
      not_compared == 0
          ? std::string()
          : fmt::format("; {} not compared (pending or being backfilled: verify again later)",
                        Plural(not_compared, "counter", "counters"));
  const uint64_t compared = chosen.size() - not_compared;
  if (compared == 0) {
    fmt::print("tally verify: nothing compared at source position {}{}\n", tally::FormatLsn(at),
               skipped);
    return kExitNotCompared;
  }
  if (differences == 0) {
    fmt::print("tally verify: equal: {} at source position {}{}\n",
               Plural(compared, "counter", "counters"), tally::FormatLsn(at), skipped);
    return not_compared == 0 ? 0 : kExitNotCompared;
  }
  if (options.repair && still_different == 0) {
    fmt::print("tally verify: repaired {} in {}; now equal at source position {}{}\n",
               Plural(repaired, "group", "groups"),
               Plural(differing_counters, "counter", "counters"), tally::FormatLsn(at), skipped);
    return not_compared == 0 ? 0 : kExitNotCompared;
  }
  fmt::print("tally verify: {} in {} of {} at source position {}{}{}\n",
             Plural(options.repair ? still_different : differences, "difference", "differences"),
             Thousands(differing_counters), Plural(compared, "counter", "counters"),
             tally::FormatLsn(at), options.repair ? " after the repair" : " (--repair fixes them)",
             skipped);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tally: tools for a running tallyd"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tally " + std::string(tally::Version()));
  VerifyOptions options;
  CLI::App* verify = app.add_subcommand(
      "verify",
      "Compares derived counters with their definitions' SELECT run on the PostgreSQL source, "
      "exactly, at one source position (tallyd holds there meanwhile). Exit 0 equal (or "
      "repaired), 1 differences, 2 error, 3 no differences but some counters not compared "
      "(pending or being backfilled).");
  verify
      ->add_option("--source", options.source,
                   "libpq connection string of the source: postgresql://user:pw@host:port/db "
                   "or key=value; the role needs REPLICATION")
      ->required();
  verify->add_option("--server", options.server, "tallyd's Redis address host:port")
      ->capture_default_str();
  verify->add_option("--password", options.password, "tallyd's --requirepass");
  verify->add_flag("--repair", options.repair,
                   "set every differing group to the source's value (atomically per batch of "
                   "1000 groups), then check again");
  verify
      ->add_option("--timeout", options.timeout,
                   "seconds to wait for the slot's creation and for tallyd to reach its "
                   "consistent point")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  verify->add_flag("--progress", options.progress,
                   "show progress on stderr even when it is not a terminal");
  verify->add_option("counter", options.counters, "counters to verify (default: all)");
  CLI11_PARSE(app, argc, argv);

  // Signals are taken by a thread of their own, which releases the hold before exiting.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::thread(SignalThread, set).detach();

  try {
    return Verify(options);
  } catch (const Failure& f) {
    std::fflush(stdout);
    fmt::print(stderr, "tally verify: {}\n", f.message);
    return 2;
  }
}
