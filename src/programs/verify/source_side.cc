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

Status Source::ForEachRow(const std::string& sql, const std::string& what, int columns,
                          const std::function<Status(const pg::PgResult&)>& visit) {
  pg_conn* const conn = sql_.get();
  if (auto sent = pg::Send(conn, sql, {}, pg::Deadline::Never(), what); !sent) {
    return tl::unexpected(FromPostgres(sent.error()));
  }
  PQsetSingleRowMode(conn);
  // The first failure; the rows after it are read and dropped, so the connection stays usable.
  std::optional<Error> failure;
  for (;;) {
    auto next = pg::NextResult(conn, pg::Deadline::Never(), what);
    if (!next) return tl::unexpected(FromPostgres(next.error()));
    const pg::PgResult& r = *next;
    if (r == nullptr) break;
    const ExecStatusType status = PQresultStatus(r.get());
    if (status == PGRES_TUPLES_OK) continue;  // the end of the rows
    if (failure) continue;
    if (status != PGRES_SINGLE_TUPLE) {
      failure = Error{ErrorCode::kInvalidArgument,
                      "PostgreSQL: " + what + ": " + pg::OneLine(PQresultErrorMessage(r.get()))};
      continue;
    }
    if (PQnfields(r.get()) != columns) {
      failure = Error{ErrorCode::kInvalidArgument,
                      fmt::format("{}: PostgreSQL returned {} columns, not {}", what,
                                  PQnfields(r.get()), columns)};
      continue;
    }
    if (auto visited = visit(r); !visited) failure = visited.error();
  }
  if (failure) return tl::unexpected(*failure);
  return OkStatus();
}

Result<std::string> RowKey(const Counter& counter, const pg::PgResult& row) {
  const PGresult* r = row.get();
  std::vector<defs::Value> parts;
  for (size_t f = 0; f < counter.compiled->key_columns().size(); ++f) {
    const int field = static_cast<int>(f);
    const Oid type = PQftype(r, field);
    if (PQgetisnull(r, 0, field)) {
      parts.push_back(defs::Value::Null());
      continue;
    }
    if (!pg::TallyTypeForPg(type)) {
      return InvalidArgument(fmt::format(
          "counter {}: key column {} ({}) has PostgreSQL type {}, which tally does not read",
          counter.name, f + 1, PQfname(r, field), pg::PgTypeName(type)));
    }
    const std::string_view text = Cell(row, field);
    auto value = pg::ParsePgText(type, text);
    if (!value) {
      return InvalidArgument(fmt::format("counter {}: key column {} ({}) = '{}': {}", counter.name,
                                         f + 1, PQfname(r, field), text.substr(0, 80),
                                         value.error().message));
    }
    parts.push_back(*value);
  }
  return defs::EncodeKey(counter.name, parts);
}

std::string_view Cell(const pg::PgResult& r, int field) {
  return {PQgetvalue(r.get(), 0, field), static_cast<size_t>(PQgetlength(r.get(), 0, field))};
}

Result<Groups> Source::CounterGroups(const Counter& counter, Progress& progress) {
  Groups groups;
  uint64_t rows = 0;
  const size_t keys = counter.compiled->key_columns().size();
  const std::vector<defs::AggregateColumn>& aggregates = counter.compiled->aggregates();
  const auto visit = [&](const pg::PgResult& r) -> Status {
    auto key = RowKey(counter, r);
    if (!key) return tl::unexpected(key.error());
    defs::GroupValue shown;
    for (size_t a = 0; a < aggregates.size(); ++a) {
      const int field = static_cast<int>(keys + a);
      if (PQgetisnull(r.get(), 0, field)) {
        shown.push_back(defs::AggregateValue::Null());
        continue;
      }
      auto value = ReadAggregate(aggregates[a], Cell(r, field));
      if (!value) {
        return InvalidArgument(fmt::format("counter {}: column {} ({}): {}", counter.name,
                                           field + 1, PQfname(r.get(), field),
                                           value.error().message));
      }
      shown.push_back(std::move(*value));
    }
    ++rows;
    if ((rows & 1023) == 0) progress.SourceRows(rows);
    if (DropsZeroGroups(*counter.compiled) && IsZero(shown)) return OkStatus();  // tally keeps none
    auto [it, inserted] = groups.emplace(std::move(*key), std::move(shown));
    if (!inserted) {
      return InvalidArgument(fmt::format("counter {}: its SELECT returned the group {} twice",
                                         counter.name, it->first));
    }
    return OkStatus();
  };
  const Status read = ForEachRow(counter.select, "counter " + counter.name + ": " + counter.select,
                                 static_cast<int>(keys + aggregates.size()), visit);
  progress.SourceRows(rows);
  if (!read) return tl::unexpected(read.error());
  return groups;
}

}  // namespace tally::verify
