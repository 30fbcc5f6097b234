// The parts of PostgresSource that its files share (internal to the source; nothing else
// includes this): a followed table, and a session, the state of one connection's life.
//
// PostgresSource is split along its seams, each file with its contract at the top:
//   postgres_source.cc  the life of the source: Start (what is refused, what is retried),
//                       the thread's reconnect loop, one session from the slot to the stream,
//                       Stop and the figures;
//   source_catalog.cc   the catalog checks of a new session (tables, columns, publication)
//                       and the following of tables that counters defined later read;
//   source_backfill.cc  the backfills from a snapshot: of every source at the first start,
//                       and of one counter defined while streaming;
//   source_stream.cc    the streaming loop: transactions applied exactly once, positions
//                       reported and acknowledged.
// Everything here is used by the source's own thread alone once Start has returned.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/program.h"  // SourceSchema
#include "sources/postgres/pg_client.h"
#include "sources/postgres/pg_types.h"
#include "sources/postgres/postgres_source.h"
#include "sources/postgres/replication_stream.h"

namespace tally::postgres {

using SourceClock = std::chrono::steady_clock;

// Now, in Unix microseconds (commit times are compared with it).
int64_t NowMicros();

// The connection string with the session settings pgoutput's text values and ours are
// parsed under (pg_types.h): options='-c DateStyle=ISO -c TimeZone=UTC' appended to any
// given, and connect_timeout=10 unless set. A string libpq cannot parse is returned as is:
// ReplicationStream::Open reports it.
std::string WithSessionSettings(const std::string& conninfo);

struct PostgresSource::Table {
  std::string source;    // tally's source name = the table's SQL name
  std::string sql_name;  // as the server prints it (quoted, qualified where needed)
  uint32_t oid = 0;
  definitions::SourceSchema schema;
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

}  // namespace tally::postgres
