// Key parts in reads: how a client names one part of a derived counter's group when it
// reads by parts (COUNTER.GET/SCAN/TOP/RANGE, GET /v1/value|list|top|range, POST /v1/values).
//
// The rule: a part is spelled exactly as it appears in the group's canonical key
// (definitions/value.h, AppendKey), so that a key a listing returns, split at its unescaped
// ':'s, can be fed back part by part, and every group can be named:
//   int64      decimal: "7", "-12" (leading zeros are accepted: "007" is 7)
//   bool       "true" or "false"
//   timestamp  the key spelling "20240501T000000Z", or any spelling ParseTimestamp reads
//              (core/timestamp.h: "2024-05-01T00:00:00Z", "2024-05-01", ...)
//   text       the bytes of the text, with '\' written "\\" and ':' written "\:"; any other
//              byte as it is (the empty part is the empty text; bytes that are not UTF-8
//              name groups of a database whose text is not UTF-8)
//   NULL       "\N", for every type; so the text "\N" is "\\N"
// A text part with a ':' that is not escaped, or a '\' that does not start "\\" or "\:",
// is refused: the same spelling means the same group on every read path.
//
// Callers: FamilyReads (family_reads.h), for every read by parts. Thread-safety: a plain
// function.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/definitions/value.h"

namespace tally::derived {

// Parses one part of a counter key as a read spells it (above) into a value of `type`. A
// text value views `text` when it holds no escape, else *storage, which the call overwrites
// with the unescaped bytes; it is valid while both are unchanged. Errors (kInvalidArgument):
//   `"abc" is not an int64`, `"99999999999999999999" is out of the int64 range`,
//   `"yes" is not a bool (true or false)`,
//   `"2024-13-01" is not a timestamp (2024-05-01T13:45:00Z or 20240501T134500Z)`,
//   `':' at byte 2 must be written \: (...)`, `'\' at byte 1 must be written \\ (...)`
//   where (...) is `(text in a key part is spelled as in the key: \: for ':', \\ for '\',
//   and \N alone is NULL)`.
Result<definitions::Value> ParseKeyPart(definitions::Type type, std::string_view text,
                                        std::string* storage);

}  // namespace tally::derived
