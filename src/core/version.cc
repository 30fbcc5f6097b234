#include "core/version.h"

namespace tally {

// TALLY_VERSION is set for this file alone by src/core/CMakeLists.txt.
std::string_view Version() { return TALLY_VERSION; }

}  // namespace tally
