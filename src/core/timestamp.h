// The spellings of a timestamp (int64 microseconds since the Unix epoch, UTC): the one
// tally writes in counter keys, and the one reader of every timestamp that comes in —
// cells of pushed changes, key parts and instants of reads, stored keys, and PostgreSQL's
// text of date, timestamp and timestamptz values. One grammar and one set of field rules
// for all of them, so that the same text means the same instant, or is refused, wherever
// it is given.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tally {

// Writes a timestamp in ISO 8601 basic format, UTC: "20240501T134500Z", with a fraction
// ".123456" only when the microseconds are not zero. It has no ':' so that a key part
// needs no escaping. Years outside 0000..9999 get a sign and as many digits as needed
// (astronomical years: "+100000101T000000Z", "-00440315T120000Z" is 45 BC).
// AppendTimestamp appends to `out` without allocating (it is on the key path).
void AppendTimestamp(int64_t micros, std::string* out);
std::string FormatTimestamp(int64_t micros);

// Reads a timestamp in one of two spellings:
//
//   extended := YYYY-MM-DD [ ('T' | ' ') hh:mm [ :ss [ .fraction ] ] [ offset ] ]
//   offset   := 'Z' | ('+' | '-') hh [ [':'] mm ] | ('+' | '-') hh:mm:ss
//   basic    := [ '+' | '-' ] YYYYMMDD 'T' hhmmss [ .fraction ] 'Z'     (FormatTimestamp's)
//
// 'T' and 'Z' may be lower case. The extended spelling is ISO 8601's and PostgreSQL's
// output (DateStyle ISO); its years have 4 to 7 digits, from 0001. The basic spelling is
// what FormatTimestamp writes, read back for every int64: 4 year digits, or a sign and 4
// to 7. No offset means UTC. The fields follow PostgreSQL's input: a day within its month,
// hh 00-23 or 24:00:00 (the end of the day), mm 00-59, ss 00-59 or 60 without a fraction
// (a leap second: the first second of the next minute), a fraction of 1 to 18 digits
// rounded to the microsecond as PostgreSQL rounds it, an offset of at most 15:59:59.
// kInvalidArgument otherwise; the message says why as a phrase to follow the text:
// "is not a valid date", "has an invalid time of day", "has an invalid UTC offset", "is
// outside the range of tally's timestamps", "is infinite; ..." (PostgreSQL's infinity),
// "is before the common era (BC); ...", "has unexpected text '...'", "is not in ISO 8601
// format (...)".
Result<int64_t> ParseTimestamp(std::string_view text);

// Reads an instant, a bound of a range read: Unix seconds (an optional '-' and digits) or
// a timestamp as ParseTimestamp reads it. Eight digits without a sign are refused: they
// read as an ISO 8601 basic date ("20240501") as much as Unix seconds (of 1970-1973), and
// taking them as seconds would silently mean 1970. kInvalidArgument with a message that
// starts with the text quoted: "\"20240501\" is ambiguous: ...", "\"soon\" is not an
// instant: ...".
Result<int64_t> ParseInstant(std::string_view text);

}  // namespace tally
