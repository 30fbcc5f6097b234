// Strict integer text conversions with Redis's rules, and overflow-checked arithmetic.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tally {

// Parses a signed 64-bit decimal exactly as Redis's string2ll does: an optional '-',
// digits, no leading '+', no spaces, no leading zeros (but "0"), within int64.
// Returns nullopt for anything else.
std::optional<int64_t> ParseInt64(std::string_view text);

// Parses an unsigned 64-bit decimal: one or more ASCII digits, within uint64, nothing else
// (no sign, no spaces). Leading zeros are allowed, unlike ParseInt64: fixed-width numbers
// (log segment names) have them. Returns nullopt for anything else.
std::optional<uint64_t> ParseUint64(std::string_view text);

// Writes `value` in decimal to `out` (at least 20 bytes) and returns the length.
int FormatInt64(int64_t value, char* out);

// a + b, or nullopt when the result leaves int64.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

}  // namespace tally
