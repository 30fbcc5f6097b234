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
    const auto digit = static_cast<uint64_t>(static_cast<unsigned char>(*p)) - '0';
    if (digit > 9) return std::nullopt;
    // Overflow checks by the carry flags, not a division per digit: this parses every
    // length of every request.
    if (__builtin_mul_overflow(magnitude, uint64_t{10}, &magnitude) ||
        __builtin_add_overflow(magnitude, digit, &magnitude)) {
      return std::nullopt;
    }
  }
  if (negative) {
    if (magnitude > static_cast<uint64_t>(INT64_MAX) + 1) return std::nullopt;
    return static_cast<int64_t>(0 - magnitude);
  }
  if (magnitude > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(magnitude);
}

std::optional<uint64_t> ParseUint64(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    const auto digit = static_cast<uint64_t>(static_cast<unsigned char>(c)) - '0';
    if (digit > 9) return std::nullopt;
    if (__builtin_mul_overflow(value, uint64_t{10}, &value) ||
        __builtin_add_overflow(value, digit, &value)) {
      return std::nullopt;
    }
  }
  return value;
}

int FormatInt64(int64_t value, char* out) {
  const auto result = std::to_chars(out, out + 20, value);
  return static_cast<int>(result.ptr - out);
}

}  // namespace tally
