#include "core/glob.h"

#include <cctype>

namespace tally {
namespace {

char Fold(char c, bool ignore_case) {
  return ignore_case ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : c;
}

// Matches a bracket class at pattern[p] ('[' already seen, p after it) against c.
// Sets p past the closing ']' (or to the end when it is missing, as Redis does).
bool MatchClass(std::string_view pattern, size_t& p, char c, bool ignore_case) {
  bool negate = false;
  if (p < pattern.size() && pattern[p] == '^') {
    negate = true;
    ++p;
  }
  bool matched = false;
  while (p < pattern.size() && pattern[p] != ']') {
    if (pattern[p] == '\\' && p + 1 < pattern.size()) {
      ++p;
      if (Fold(pattern[p], ignore_case) == Fold(c, ignore_case)) matched = true;
    } else if (p + 2 < pattern.size() && pattern[p + 1] == '-' && pattern[p + 2] != ']') {
      char low = Fold(pattern[p], ignore_case);
      char high = Fold(pattern[p + 2], ignore_case);
      if (low > high) std::swap(low, high);
      const char folded = Fold(c, ignore_case);
      if (folded >= low && folded <= high) matched = true;
      p += 2;
    } else if (Fold(pattern[p], ignore_case) == Fold(c, ignore_case)) {
      matched = true;
    }
    ++p;
  }
  if (p < pattern.size()) ++p;  // the ']'
  return negate ? !matched : matched;
}

// Matches the one-character token at pattern[p] (a literal, '?', an escape or a class)
// against c; sets `next` past the token.
bool MatchToken(std::string_view pattern, size_t p, char c, bool ignore_case, size_t* next) {
  switch (pattern[p]) {
    case '?':
      *next = p + 1;
      return true;
    case '[':
      ++p;
      {
        const bool matched = MatchClass(pattern, p, c, ignore_case);
        *next = p;
        return matched;
      }
    case '\\':
      if (p + 1 < pattern.size()) ++p;
      [[fallthrough]];
    default:
      *next = p + 1;
      return Fold(pattern[p], ignore_case) == Fold(c, ignore_case);
  }
}

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view text, bool ignore_case) {
  // Greedy matching that remembers only the latest '*': O(pattern x text) at worst, so a
  // hostile pattern of many stars cannot stall the server.
  size_t p = 0;
  size_t t = 0;
  size_t star_p = std::string_view::npos;
  size_t star_t = 0;
  while (t < text.size()) {
    size_t next;
    if (p < pattern.size() && pattern[p] == '*') {
      while (p < pattern.size() && pattern[p] == '*') ++p;
      star_p = p;
      star_t = t;
    } else if (p < pattern.size() && MatchToken(pattern, p, text[t], ignore_case, &next)) {
      p = next;
      ++t;
    } else if (star_p != std::string_view::npos) {
      p = star_p;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace tally
