// The whole state of groups of a counter that keeps hidden records (count(DISTINCT), min,
// max, avg, several aggregates: definitions' Layout kDistinct and kComposite), read from
// PostgreSQL in verify's snapshot, for `tally verify --repair` to set with
// COUNTER.REPAIRSTATE. The SELECT shows less than such a group keeps (a max, not the rows of
// every value), so the records are read with queries of their own, built from the compiled
// counter (its key columns, FROM, WHERE and each aggregate's argument):
//
//   SELECT <keys>, count(*) [, count(<arg i>) | , sum(<arg i>), count(<arg i>)] ...
//     FROM <source> [WHERE <filter>] GROUP BY <keys>
//       kComposite only: each group's rows, and per count(x) its count, per sum(x) and
//       avg(x) its sum and count (a sum NULL or 0 is no record)
//   SELECT <keys>, <arg i>, count(*) FROM <source> WHERE [(<filter>) AND] (<arg i>) IS NOT NULL
//     GROUP BY <keys>, <arg i>
//       per count(DISTINCT x), min(x) and max(x): the rows of each value
//
// (GROUP BY by position, so that a constant argument is not read as one.) Each value and sum
// is converted by the definitions layer's own functions (ValueBytes, ParseDecimal,
// AppendRecordTag), so it is byte for byte what the formula would have written.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/definitions/aggregate.h"
#include "engine/definitions/program.h"
#include "programs/verify/source_side.h"
#include "programs/verify/tally_side.h"

namespace tally::verify {

// One group's whole state, as COUNTER.REPAIRSTATE takes it (engine/derived/aggregate_state.h).
struct GroupState {
  std::string key;
  // What the group's key holds: its rows (kComposite) or its number of distinct values
  // (kDistinct); 0 with no records: no group.
  int64_t value = 0;
  std::vector<std::pair<std::string, int64_t>> records;  // tag (definitions::RecordTag), value
};

// One query of the records (see above).
struct RecordQuery {
  std::string sql;
  // The aggregate whose values it reads (the second form); -1 for the first form.
  int64_t values_of = -1;
  // The first form: the record each column after count(*) holds, in order.
  std::vector<std::pair<uint32_t, definitions::RecordKind>> columns;
};

// The queries that read every record of `counter`'s groups. REQUIRES: not plain.
std::vector<RecordQuery> RecordQueries(const definitions::CompiledCounter& counter);

// The states of `counter`'s groups `keys` at the source, in the order of `keys`; a group the
// source does not have has value 0 and no records. Errors: PostgreSQL's, and a value that
// does not convert (InvalidArgument naming the counter and the group). REQUIRES: `counter`
// is not plain; `source` has imported the snapshot.
Result<std::vector<GroupState>> SourceStates(Source& source, const Counter& counter,
                                             std::span<const std::string> keys);

}  // namespace tally::verify
