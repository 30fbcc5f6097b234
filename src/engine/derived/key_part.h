// Key parts in reads: how a client names one part of a derived counter's group when it
// reads by parts (COUNTER.GET/SCAN/TOP/RANGE, GET /v1/value|list|top|range, POST /v1/values).
//
// Callers: FamilyReads (family_reads.h), for every read by parts. Thread-safety: a plain
// function.
#pragma once

#include <string_view>

#include "core/status.h"
#include "engine/definitions/value.h"

namespace tally::derived {

// Parses one part of a counter key as a client spells it in a read (a path segment, a
// Redis argument) into a value of `type`: an int64 in decimal, true/false, a timestamp as
// ParseTimestamp reads it (the key spelling "20240501T000000Z" or ISO 8601 as above),
// text verbatim (the Value views `text`); "\N" is NULL for every type, so a text "\N"
// cannot be read this way. Errors (kInvalidArgument): `"abc" is not an int64`,
// `"99999999999999999999" is out of the int64 range`, `"yes" is not a bool (true or
// false)`, `"2024-13-01" is not a timestamp (2024-05-01T13:45:00Z or 20240501T134500Z)`.
Result<definitions::Value> ParseKeyPart(definitions::Type type, std::string_view text);

}  // namespace tally::derived
