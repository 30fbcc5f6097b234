// The comparison at the heart of `tally verify`: a counter's groups as tallyd has them and
// as its definition's SELECT gives them at the source, both keyed as tally keys them
// (definitions::EncodeKey), groups of value 0 absent on both sides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/definitions/compiler.h"

namespace tally::verify {

// A counter's groups: encoded key -> value (never 0).
using Groups = std::unordered_map<std::string, int64_t>;

// A group whose values differ; a group missing on one side is 0 there.
struct Difference {
  std::string key;
  int64_t tally = 0;
  int64_t source = 0;

  bool operator==(const Difference&) const = default;
};

// Every group whose values differ, by key.
std::vector<Difference> Compare(const Groups& tally, const Groups& source);

// Drops the groups of a counter with a retention whose time bucket is past it at
// `now_micros`: tallyd removes those groups and skips late changes to them, while the source
// keeps their rows. Expiry only grows with time, so with `now_micros` read after both sides
// were, every group kept here was within retention all along and is compared exactly.
// Returns how many groups it dropped (none without a retention).
size_t DropExpired(const definitions::CompiledCounter& counter, int64_t now_micros, Groups& groups);

}  // namespace tally::verify
