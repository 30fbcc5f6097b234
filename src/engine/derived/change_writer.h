// ChangeWriter: source row changes written back as the JSON that ChangeDecoder reads
// (change_json.h), for a cluster's PostgreSQL consumer, which puts each source transaction
// in the cluster's change stream where every partition owner decodes its share.
//
// One change per line: {"source":"<name>","old":{<column>:<value>,...},"new":{...}}, every
// column of the source's schema, NULL as null. Cells are spelled so that the decoder reads
// back exactly the same Value: int64 as a number; bool; text as a JSON string; timestamp as
// FormatTimestamp writes it; numeric as a decimal string ("1234.50"); float as the shortest
// number that reads back the same double. A float NaN or infinity has no JSON spelling: it
// is refused (kInvalidArgument), as is a TRUNCATE (it is not a row: the consumer sends it as
// a message of its own).
#pragma once

#include <span>
#include <string>

#include "core/status.h"
#include "engine/definitions/program.h"
#include "engine/derived/apply.h"

namespace tally::derived {

// Appends `change`, a change of the source `schema` describes, and a newline to `out`.
// On error `out` is left as it was.
Status AppendChangeJson(const definitions::SourceSchema& schema, const SourceRowChange& change,
                        std::string* out);

}  // namespace tally::derived
