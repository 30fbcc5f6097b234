// `tally verify`'s side of the PostgreSQL source: two connections to its database, which
// together read every counter's rows exactly as of one source position.
//
//   - A replication connection creates a TEMPORARY logical slot with an exported snapshot
//     (ReplicationStream::CreateSlot): consistent point C, snapshot S. The slot goes with
//     the connection, which stays open and idle until the end so that S stays importable.
//   - A regular connection, in UTC with ISO dates (as tally parses values), imports S in a
//     REPEATABLE READ READ ONLY transaction: each counter's SELECT (the definition's own,
//     valid PostgreSQL) then sees the rows exactly as of C.
//
// Errors are values, "PostgreSQL: …" unless they come from connecting. Not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/lsn.h"
#include "core/status.h"
#include "programs/verify/compare.h"
#include "programs/verify/progress.h"
#include "programs/verify/tally_side.h"
#include "sources/postgres/pg_client.h"
#include "sources/postgres/replication_stream.h"

namespace tally::verify {

class Source {
 public:
  // Connects to the database of `conninfo` (a libpq connection string): the regular
  // connection first ("cannot connect to PostgreSQL: <libpq's reason>"), then the replication
  // one, whose commands wait at most `timeout`. The role needs REPLICATION.
  static Result<std::unique_ptr<Source>> Connect(const std::string& conninfo,
                                                 std::chrono::milliseconds timeout);

  // The server's WAL position now (pg_current_wal_lsn()).
  Result<Lsn> CurrentWalPosition();

  // Creates the temporary slot: its consistent point C and exported snapshot S.
  // REQUIRES: called once.
  Result<postgres::CreatedSlot> CreateSlot();

  // Imports `snapshot` (CreateSlot's) on the regular connection: from here on Groups reads
  // the rows as of the slot's consistent point. REQUIRES: CreateSlot returned `snapshot`.
  Status ImportSnapshot(const std::string& snapshot);

  // The groups `counter`'s SELECT gives, keyed as tally keys them (ParsePgText over each
  // key column, then EncodeKey) and valued as tally shows them (ReadAggregate over each
  // aggregate); groups at 0 or NULL of a counter that keeps none are left out (compare.h).
  // Rows come one at a time (single-row mode), so a large family is never held twice.
  // REQUIRES: ImportSnapshot.
  Result<Groups> CounterGroups(const Counter& counter, Progress& progress);

  // Runs `sql` (`what` names it in errors) and hands its rows, one at a time (single-row
  // mode), to `visit`. The first error (PostgreSQL's, a row of other than `columns` fields,
  // or visit's) is returned once the rest of the rows are read and dropped, so that the
  // connection stays usable. REQUIRES: ImportSnapshot.
  Status ForEachRow(const std::string& sql, const std::string& what, int columns,
                    const std::function<Status(const postgres::PgResult&)>& visit);

  // Ends the snapshot transaction.
  Status Commit();

 private:
  Source() = default;

  postgres::PgConn sql_;
  std::unique_ptr<postgres::ReplicationStream> repl_;
};

// The group key of a row (of ForEachRow) whose first fields are `counter`'s key columns, as
// tally keys it: ParsePgText over each, then EncodeKey. InvalidArgument naming the column.
Result<std::string> RowKey(const Counter& counter, const postgres::PgResult& row);

// The text of field `field` of a row of ForEachRow.
std::string_view Cell(const postgres::PgResult& row, int field);

}  // namespace tally::verify
