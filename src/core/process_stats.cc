#include "core/process_stats.h"

#include <unistd.h>

#include <fstream>

namespace tally {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages_total = 0;
  int64_t pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * sysconf(_SC_PAGESIZE);
}

}  // namespace tally
