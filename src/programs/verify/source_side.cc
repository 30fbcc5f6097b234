#include "programs/verify/source_side.h"

#include <fmt/core.h>
#include <libpq-fe.h>
#include <unistd.h>

#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/definitions/value.h"
#include "sources/postgres/pg_types.h"

namespace tally::verify {
namespace {

namespace defs = tally::definitions;
namespace pg = tally::postgres;

constexpr std::chrono::milliseconds kConnectTimeout{10'000};
constexpr std::string_view kApplicationName = "tally verify";

Error FromPostgres(const Error& error) { return Error{error.code, "PostgreSQL: " + error.message}; }

// The connection string's parameters. As libpq reads a database name given where a
// connection string may stand (expand_dbname), a string that is neither key=value nor a URI
// names the database.
Result<pg::ConnParams> ParseSource(const std::string& conninfo) {
  const bool uri = conninfo.starts_with("postgresql://") || conninfo.starts_with("postgres://");
  if (!uri && conninfo.find('=') == std::string::npos) return pg::ConnParams{{"dbname", conninfo}};
  return pg::ParseConnString(conninfo);
}

}  // namespace

Result<std::unique_ptr<Source>> Source::Connect(const std::string& conninfo,
                                                std::chrono::milliseconds timeout) {
  auto params = ParseSource(conninfo);
  if (!params) return InvalidArgument("cannot connect to PostgreSQL: " + params.error().message);
  pg::ConnectOptions options;
  options.application_name = kApplicationName;
  options.timeout = kConnectTimeout;
  auto sql = pg::Connect(*params, options);
  if (!sql) {
    return MakeError(ErrorCode::kUnavailable,
                     "cannot connect to PostgreSQL: " + sql.error().reason);
  }
  std::unique_ptr<Source> source(new Source());
  source->sql_ = std::move(*sql);
  // Values in the text tally parses (pg_types.h).
  if (auto set = pg::Exec(source->sql_.get(),
                          "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = "
                          "'postgres'",
                          {}, pg::Deadline::Never(), "setting UTC and ISO dates");
      !set) {
    return tl::unexpected(FromPostgres(set.error()));
  }
  pg::ReplicationOptions replication;
  replication.application_name = kApplicationName;
  replication.connect_timeout = kConnectTimeout;
  replication.command_timeout = timeout;
  source->repl_ = std::make_unique<pg::ReplicationStream>(replication);
  if (auto opened = source->repl_->Open(pg::FormatConnString(*params)); !opened) {
    return tl::unexpected(opened.error());
  }
  return source;
}

Result<Lsn> Source::CurrentWalPosition() {
  auto r = pg::Exec(sql_.get(), "SELECT pg_current_wal_lsn()::text", {}, pg::Deadline::Never(),
                    "pg_current_wal_lsn()");
  if (!r) return tl::unexpected(FromPostgres(r.error()));
  auto lsn = ParseLsn(pg::Text(r->get(), 0, 0));
  if (!lsn) return InvalidArgument("PostgreSQL: pg_current_wal_lsn(): " + lsn.error().message);
  return *lsn;
}

Result<pg::CreatedSlot> Source::CreateSlot() {
  std::mt19937_64 rng(std::random_device{}());
  const std::string name = fmt::format("tally_verify_{}_{:x}", getpid(), rng() & 0xffffff);
  auto created = repl_->CreateSlot(name, pg::ReplicationStream::SlotLifetime::kTemporary);
  if (!created) return tl::unexpected(FromPostgres(created.error()));
  return created;
}

Status Source::ImportSnapshot(const std::string& snapshot) {
  if (auto begun = pg::BeginSnapshotTransaction(sql_.get(), snapshot, pg::Deadline::Never());
      !begun) {
    return tl::unexpected(FromPostgres(begun.error()));
  }
  return OkStatus();
}

Status Source::Commit() {
  if (auto r = pg::Exec(sql_.get(), "COMMIT", {}, pg::Deadline::Never(), "COMMIT"); !r) {
    return tl::unexpected(FromPostgres(r.error()));
  }
  return OkStatus();
}

Result<Groups> Source::CounterGroups(const Counter& counter, Progress& progress) {
  pg_conn* const conn = sql_.get();
  const std::string what = "counter " + counter.name + ": " + counter.select;
  if (auto sent = pg::Send(conn, counter.select, {}, pg::Deadline::Never(), what); !sent) {
    return tl::unexpected(FromPostgres(sent.error()));
  }
  PQsetSingleRowMode(conn);
  Groups groups;
  uint64_t rows = 0;
  // The first failure; the rows after it are read and dropped, so the connection stays usable.
  std::optional<Error> failure;
  auto fail = [&](std::string message) {
    if (!failure) failure = Error{ErrorCode::kInvalidArgument, std::move(message)};
  };
  std::vector<defs::Value> parts;
  for (;;) {
    auto next = pg::NextResult(conn, pg::Deadline::Never(), what);
    if (!next) return tl::unexpected(FromPostgres(next.error()));
    const pg::PgResult& r = *next;
    if (r == nullptr) break;
    const ExecStatusType status = PQresultStatus(r.get());
    if (status == PGRES_TUPLES_OK) continue;  // the end of the rows
    if (status != PGRES_SINGLE_TUPLE) {
      fail("PostgreSQL: " + what + ": " + pg::OneLine(PQresultErrorMessage(r.get())));
      continue;
    }
    if (failure) continue;
    const int fields = PQnfields(r.get());
    if (fields < 1) {
      fail("counter " + counter.name + ": its SELECT returned no columns");
      continue;
    }
    parts.clear();
    for (int f = 0; f < fields && !failure; ++f) {
      const Oid type = PQftype(r.get(), f);
      if (f + 1 < fields && !pg::TallyTypeForPg(type) && !PQgetisnull(r.get(), 0, f)) {
        fail(fmt::format(
            "counter {}: key column {} ({}) has PostgreSQL type {}, which tally does not read",
            counter.name, f + 1, PQfname(r.get(), f), pg::PgTypeName(type)));
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
        fail(fmt::format("counter {}: column {} ({}) = '{}': {}", counter.name, f + 1,
                         PQfname(r.get(), f), text.substr(0, 80),
                         value ? "the value is not an integer" : value.error().message));
        break;
      }
      parts.push_back(*value);
    }
    if (failure) continue;
    ++rows;
    if ((rows & 1023) == 0) progress.SourceRows(rows);
    const defs::Value& value = parts.back();
    if (value.is_null() || value.i == 0) continue;  // tally keeps no zero group
    std::string key = defs::EncodeKey(counter.name, std::span(parts.data(), parts.size() - 1));
    auto [it, inserted] = groups.emplace(std::move(key), value.i);
    if (!inserted) {
      fail(fmt::format("counter {}: its SELECT returned the group {} twice", counter.name,
                       it->first));
    }
  }
  progress.SourceRows(rows);
  if (failure) return tl::unexpected(*failure);
  return groups;
}

}  // namespace tally::verify
