// What every fuzz target here shares: an invariant check that libFuzzer records as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tally::fuzz {

// Aborts with a message unless `condition` holds, so that libFuzzer keeps the input as a
// crash; `detail` (optional) says what was seen.
inline void Check(bool condition, const char* what, std::string_view detail = {}) {
  if (condition) return;
  std::fprintf(stderr, "invariant broken: %s\n", what);
  if (!detail.empty()) {
    std::fprintf(stderr, "  seen: %.*s\n", static_cast<int>(detail.size()), detail.data());
  }
  std::abort();
}

}  // namespace tally::fuzz
