#include "programs/byte_size.h"

#include <fmt/format.h>

#include <charconv>
#include <string>

namespace tally::programs {
namespace {

// The multiplier of a unit, lowercase; 0 for an unknown one.
int64_t UnitBytes(std::string_view unit) {
  if (unit.empty() || unit == "b") return 1;
  if (unit == "k" || unit == "kb") return int64_t{1} << 10;
  if (unit == "m" || unit == "mb") return int64_t{1} << 20;
  if (unit == "g" || unit == "gb") return int64_t{1} << 30;
  return 0;
}

}  // namespace

Result<int64_t> ParseByteSize(std::string_view text) {
  int64_t number = 0;
  const char* end = text.data() + text.size();
  const auto [rest, error] = std::from_chars(text.data(), end, number);
  if (error == std::errc::result_out_of_range) {
    return InvalidArgument(fmt::format("bad size '{}': too large", text));
  }
  if (error != std::errc() || number < 0) {
    return InvalidArgument(
        fmt::format("bad size '{}': give a number of bytes, optionally with a unit (64mb)", text));
  }
  std::string unit(rest, end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const int64_t multiplier = UnitBytes(unit);
  if (multiplier == 0) {
    return InvalidArgument(
        fmt::format("bad size '{}': unknown unit '{}' (use b, kb, mb or gb)", text, unit));
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(number, multiplier, &bytes)) {
    return InvalidArgument(fmt::format("bad size '{}': too large", text));
  }
  return bytes;
}

}  // namespace tally::programs
