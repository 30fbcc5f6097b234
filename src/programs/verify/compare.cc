#include "programs/verify/compare.h"

#include <algorithm>

namespace tally::verify {

std::vector<Difference> Compare(const Groups& tally, const Groups& source) {
  std::vector<Difference> out;
  for (const auto& [key, value] : tally) {
    const auto it = source.find(key);
    const int64_t want = it == source.end() ? 0 : it->second;
    if (want != value) out.push_back({key, value, want});
  }
  for (const auto& [key, value] : source) {
    if (!tally.contains(key)) out.push_back({key, 0, value});
  }
  std::ranges::sort(out, {}, &Difference::key);
  return out;
}

size_t DropExpired(const definitions::CompiledCounter& counter, int64_t now_micros,
                   Groups& groups) {
  if (!counter.retention()) return 0;
  return std::erase_if(
      groups, [&](const auto& group) { return counter.KeyExpired(group.first, now_micros); });
}

}  // namespace tally::verify
