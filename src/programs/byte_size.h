// Sizes as tallyd's options spell them, as Redis does: "1048576", "512k", "64mb", "1gb".
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace tally::programs {

// A number of bytes: decimal digits, then optionally a unit (b, k or kb, m or mb, g or gb; any
// case; 1k = 1024). An error, saying why, for anything else: no digits, a sign, an unknown
// unit, or a size past int64.
Result<int64_t> ParseByteSize(std::string_view text);

}  // namespace tally::programs
