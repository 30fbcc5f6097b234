// PostgresSource's catalog checks (see source_session.h for the files of the source).
//
// Connect opens a session: the replication connection (IDENTIFY_SYSTEM), REPLICA IDENTITY
// FULL of every followed table, the publication (created or extended), then a regular
// connection on which each table is looked up (its oid, its name as the server prints it)
// and its columns checked against the source's, as each Relation message will be. Every
// refusal says what is wrong; an error that trying again later may get past is kUnavailable
// (the server unreachable or not taking connections now, a lost connection, a timeout:
// pg_client.h), anything else needs fixing first.
//
// FollowNewTables, between two transactions of the stream, takes up the tables that
// counters defined since Start read: each one that can be followed joins, and the session
// reconnects to add it to the publication and the stream.
#include <fmt/core.h>
#include <fmt/format.h>
#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "sources/postgres/source_session.h"

namespace tally::postgres {

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
  if (!sql) return tl::unexpected(sql.error().ToError("cannot connect"));
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
    table.position = target_.SourcePosition(name);
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
    auto applied = ApplyTo(source, {}, static_cast<int64_t>(processed));
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

}  // namespace tally::postgres
