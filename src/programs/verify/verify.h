// `tally verify`: compares every derived counter of a running tallyd (or the ones named)
// with its definition's SELECT run on the PostgreSQL source, exactly, at one source
// position, while both keep working:
//
//   1. A TEMPORARY logical slot is created with an exported snapshot on a replication
//      connection: consistent point C, snapshot S (source_side.h).
//   2. tallyd is told to hold at C (COUNTER.HOLD C, hold.h): transactions above C wait; once
//      everything up to C is applied the hold is *reached*. To leave tallyd no time to run
//      past C before the hold lands, a first hold is set at the server's WAL position before
//      the slot is created, then moved to C in one step (COUNTER.HOLD C REPLACE). Should
//      tallyd still have applied a transaction past C (COUNTER.HOLD reports the highest
//      source position applied), all this is done again (5 times at most). Against a
//      cluster the same commands go to one node, which sets the hold through the cluster's
//      change stream and reports it reached once its copy of every partition is there
//      (cluster/change_front.h).
//   3. S is imported on a regular connection: every counter's SELECT sees the rows exactly
//      as of C.
//   4. tallyd's groups are read with COUNTER.SCAN while the hold stands and compared with
//      the SELECT's rows, keyed as tally keys them (compare.h). A counter with a retention
//      is compared on its groups within retention only, by tallyd's clock read after both
//      sides. Counters not whole yet (pending, backfilling) are not compared.
//   5. With --repair, every differing group is set to the source's (repair.h: batches of
//      1000 groups, each one atomic commit), still held: a plain counter's value with
//      COUNTER.REPAIR; any other counter's whole state (its key and hidden records, read in
//      the same snapshot, source_states.h) with COUNTER.REPAIRSTATE. Then the counter is
//      read again and must be equal.
//   6. COUNTER.RELEASE, always: also on errors, and on signals (Hold::ReleaseOnSignals).
//
// Output (stdout): one line per difference, "<key>: tally <X>, source <Y>", values as
// tally shows them ("12.50", "20240501T134500Z", NULL, "(3, 12.50, NULL)" for several
// aggregates; a missing group reads 0, or "no group" for a counter of min, max, avg or
// several aggregates), one summary line per counter, and a last line. Progress
// (stderr, when stderr is a terminal or with --progress): rows read from the source and
// groups read from tally out of the counter's group count.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "programs/verify/hold.h"

namespace tally::verify {

// Exit statuses.
constexpr int kExitEqual = 0;        // all equal, or repaired
constexpr int kExitDifferent = 1;    // differences found and not repaired
constexpr int kExitError = 2;        // verify could not finish (an error, a signal)
constexpr int kExitNotCompared = 3;  // nothing differs, but some counters were not compared

struct VerifyOptions {
  std::string source;                     // libpq connection string; the role needs REPLICATION
  std::string server = "127.0.0.1:6380";  // tallyd's Redis address
  Credentials tallyd;                     // --user and --password: who signs in to tallyd
  bool repair = false;                    // set differing groups to the source's values
  double timeout = 60;                // seconds for the slot's creation and for tallyd to reach C
  bool progress = false;              // progress on stderr even when it is no terminal
  std::vector<std::string> counters;  // the counters to verify; empty: all
};

// Runs the verification and prints its results; returns the exit status. An error (exit
// status kExitError) is returned for the caller to print as "tally verify: <message>"; the
// hold is released by then. `hold` names the same tallyd as options.server.
Result<int> Verify(const VerifyOptions& options, Hold& hold);

}  // namespace tally::verify
