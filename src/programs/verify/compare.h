// The comparison at the heart of `tally verify`: a counter's groups as tallyd has them and
// as its definition's SELECT gives them at the source, both keyed as tally keys them
// (definitions::EncodeKey) and valued as tally shows them (definitions/aggregate.h: one
// value per aggregate: an integer, an exact decimal, a timestamp or NULL).
//
// Which groups exist follows the counter's layout: a counter of one count, sum or
// count(DISTINCT) keeps no group at 0, so a group at 0 (or NULL) is left out of both sides
// and a missing group reads 0; any other counter (min, max, avg, several aggregates) has a
// group exactly while the group has rows, as PostgreSQL's GROUP BY has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/definitions/aggregate.h"
#include "engine/definitions/compiler.h"

namespace tally::verify {

// A counter's groups: encoded key -> its value, one AggregateValue per aggregate.
using Groups = std::unordered_map<std::string, definitions::GroupValue>;

// A group whose values differ; a group missing on one side has that side's value empty.
struct Difference {
  std::string key;
  definitions::GroupValue tally;
  definitions::GroupValue source;

  bool operator==(const Difference&) const = default;
};

// Every group whose values differ, by key. Decimals compare by value ("12.5" = "12.50");
// a missing group equals one at 0 when `counter` keeps no group at 0 (KeepsZeroGroups).
std::vector<Difference> Compare(const definitions::CompiledCounter& counter, const Groups& tally,
                                const Groups& source);

// True when a group of `counter` at 0 is no group: one count(*), count(x), sum(x) or
// count(DISTINCT x). Such groups are left out of a side (IsZero).
bool DropsZeroGroups(const definitions::CompiledCounter& counter);
// True for a value of one aggregate that is 0 ("0", "0.00") or NULL.
bool IsZero(const definitions::GroupValue& value);

// One side's value of a group as a line shows it: GroupText, "0" (or "0.00") for a missing
// group of a counter that drops its zero groups, "no group" for any other missing group.
std::string ShownText(const definitions::CompiledCounter& counter,
                      const definitions::GroupValue& value);

// Reads `text`, aggregate `column`'s value as tallyd or PostgreSQL spells it: an integer
// ("42"), a decimal ("-1234.50"; no NaN or infinity), a timestamp in any spelling of
// ParseTimestamp ("20240501T134500Z", "2024-05-01 13:45:00+00"). InvalidArgument saying
// what was expected.
Result<definitions::AggregateValue> ReadAggregate(const definitions::AggregateColumn& column,
                                                  std::string_view text);

// The int64 a COUNTER.REPAIR sets a group of plain `counter` to for `value`: the count or
// sum itself, a numeric sum in units of its scale. InvalidArgument when it does not fit.
Result<int64_t> RepairValue(const definitions::CompiledCounter& counter,
                            const definitions::GroupValue& value);

// Drops the groups of a counter with a retention whose time bucket is past it at
// `now_micros`: tallyd removes those groups and skips late changes to them, while the source
// keeps their rows. Expiry only grows with time, so with `now_micros` read after both sides
// were, every group kept here was within retention all along and is compared exactly.
// Returns how many groups it dropped (none without a retention).
size_t DropExpired(const definitions::CompiledCounter& counter, int64_t now_micros, Groups& groups);

}  // namespace tally::verify
