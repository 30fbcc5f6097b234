// `tally verify --repair`: sets the differing groups of one counter to the source's, in
// batches, each batch one atomic commit of tallyd, durable before its reply:
//   - a plain counter (one count or sum): COUNTER.REPAIR counter key value ..., the values
//     the comparison read (RepairValue);
//   - any other counter (count(DISTINCT), min, max, avg, several aggregates): each group's
//     whole state read from the source (source_states.h), with COUNTER.REPAIRSTATE counter
//     key value records tag number ...
// Verify then reads the counter again and compares. REQUIRES: the hold stands and `source`
// has imported the snapshot the differences were found at.
#pragma once

#include <vector>

#include "core/status.h"
#include "programs/verify/compare.h"
#include "programs/verify/resp_client.h"
#include "programs/verify/source_side.h"
#include "programs/verify/tally_side.h"

namespace tally::verify {

// Sets every group of `differences` to the source's value or state. Errors: tallyd's
// (a refused command) or PostgreSQL's, a value that does not convert, a group whose records
// are more than one command carries.
Status RepairCounter(const Counter& counter, RespClient& tally, Source& source,
                     const std::vector<Difference>& differences);

}  // namespace tally::verify
