// Positions in a change stream, spelled as PostgreSQL spells an LSN (a WAL position). The
// derived layer stores each source's position as an int64, the Redis and HTTP servers show
// and take hold positions in this spelling, and the PostgreSQL source reads it from the wire.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tally {

// A WAL position (PostgreSQL's XLogRecPtr).
using Lsn = uint64_t;

// "16/B374D848": the high 32 bits, '/', the low 32 bits zero-padded to 8 hex digits, upper
// case (as PostgreSQL 18 prints it; older versions drop the padding).
std::string FormatLsn(Lsn lsn);

// Parses "X/X": 1 to 8 hex digits (either case) on each side of '/', nothing else. Accepts
// both the padded and the unpadded spelling. InvalidArgument otherwise.
Result<Lsn> ParseLsn(std::string_view text);

}  // namespace tally
