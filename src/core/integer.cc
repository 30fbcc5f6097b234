#include "core/integer.h"

#include <charconv>

namespace tally {

std::optional<int64_t> ParseInt64(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  const char* p = text.data();
  const char* end = p + text.size();
  bool negative = false;
  if (*p == '-') {
    negative = true;
    ++p;
    if (p == end) return std::nullopt;
  }
  // Redis refuses leading zeros so that every value has exactly one spelling.
  if (*p == '0') {
    if (p + 1 == end && !negative) return 0;
    return std::nullopt;
  }
  uint64_t magnitude = 0;
  for (; p != end; ++p) {
    if (*p < '0' || *p > '9') return std::nullopt;
    const auto digit = static_cast<uint64_t>(*p - '0');
    if (magnitude > (UINT64_MAX - digit) / 10) return std::nullopt;
    magnitude = magnitude * 10 + digit;
  }
  if (negative) {
    if (magnitude > static_cast<uint64_t>(INT64_MAX) + 1) return std::nullopt;
    return static_cast<int64_t>(0 - magnitude);
  }
  if (magnitude > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(magnitude);
}

int FormatInt64(int64_t value, char* out) {
  const auto result = std::to_chars(out, out + 20, value);
  return static_cast<int>(result.ptr - out);
}

}  // namespace tally
