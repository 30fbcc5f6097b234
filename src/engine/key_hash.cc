#include "engine/key_hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tally::engine {

uint64_t HashKey(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }

}  // namespace tally::engine
