#include "core/lsn.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

namespace tally {

std::string FormatLsn(Lsn lsn) {
  return fmt::format("{:X}/{:08X}", static_cast<uint32_t>(lsn >> 32), static_cast<uint32_t>(lsn));
}

Result<Lsn> ParseLsn(std::string_view text) {
  const size_t slash = text.find('/');
  auto half = [](std::string_view s, uint32_t* out) {
    if (s.empty() || s.size() > 8) return false;
    for (char c : s) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    }
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
    return ec == std::errc() && p == s.data() + s.size();
  };
  uint32_t hi = 0, lo = 0;
  if (slash == std::string_view::npos || !half(text.substr(0, slash), &hi) ||
      !half(text.substr(slash + 1), &lo)) {
    return InvalidArgument(fmt::format(
        "invalid LSN '{}': expected two hex numbers of 1 to 8 digits as in '16/B374D848'", text));
  }
  return (Lsn{hi} << 32) | lo;
}

}  // namespace tally
