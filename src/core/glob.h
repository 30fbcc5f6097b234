// Glob-style pattern matching with Redis's rules (KEYS, SCAN MATCH, CONFIG GET):
// * ? [abc] [^a] [a-z] and \ to escape.
#pragma once

#include <string_view>

namespace tally {

bool GlobMatch(std::string_view pattern, std::string_view text, bool ignore_case = false);

}  // namespace tally
