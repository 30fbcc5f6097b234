// Figures of this process from the OS, for INFO and metrics.
#pragma once

#include <cstdint>

namespace tally {

// Resident memory (RSS) in bytes, from /proc/self/statm; 0 when it cannot be read.
int64_t ResidentBytes();

}  // namespace tally
