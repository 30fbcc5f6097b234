// FamilyReads: the reads of a derived counter's groups — a group's key from its parts
// (KeyOf, PrefixOf), a page of groups in key order (List), the k largest (Top) and the sum
// of a group's time buckets between two instants, or their min, max, avg or distinct values
// (Range).
//
// Keys come from the family's index (family.h), values from the keyspace, a chunk of keys
// per View (DerivedKeyspace::Get); each answer carries the commit epoch it depends on, to
// be durable before the reply leaves. A top-K answer is cached per (prefix, k) in the
// family and recomputed when the family changed and the cached answer is older than
// `top_k_max_staleness_ms`. Range counts buckets past retention as gone even before the
// sweep removes them; the other reads see a bucket until it is swept.
//
// Callers: DerivedCounters, for the Redis and HTTP reads of derived counters.
//
// Thread-safety: any thread, concurrently. The reads take no lock of the derived layer:
// the caller passes a family of the snapshot it took, which stays valid (a family dropped
// meanwhile has an empty index). They take the family's index mutex, never while holding
// a View, and Views of the keys they read.
//
// Errors: kInvalidArgument for parts that do not fit the counter's key columns (the
// message names the part and its type), a cursor of another listing, a range read's bad
// instants or a counter without a single time bucket; kOverflow when a range's count or
// sum leaves the int64 range.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/derived/derived_keyspace.h"
#include "engine/derived/family.h"

namespace tally::derived {

// The outcome of a range read: a group's time buckets taken together.
struct RangeSum {
  // key: empty. value: the buckets' values added up (for a count or an integer sum, the
  // answer). shown: for a counter whose value is not that integer (ShowsInteger false), the
  // value of the buckets' rows as one group (GroupCombination, aggregate_state.h).
  KeyValue total;
  std::vector<std::string> names;  // as Page::names
  size_t buckets = 0;              // the buckets taken (those holding a value)
  uint64_t required_epoch = 0;
};

class FamilyReads {
 public:
  // `keyspace` must outlive this object.
  FamilyReads(DerivedKeyspace& keyspace, int64_t top_k_max_staleness_ms)
      : keyspace_(keyspace), top_k_max_staleness_ms_(top_k_max_staleness_ms) {}

  // The canonical key of `family`'s group given as parts, all of them, each spelled as in
  // the key (key_part.h).
  static Result<std::string> KeyOf(const Family& family, std::span<const std::string_view> parts);
  // The key prefix "counter:part:...:" of the first parts.size() key columns (fewer than
  // all; spelled as key_part.h says); it ends with an unescaped ':', so it matches whole
  // parts only. A counter without key columns has the one prefix "counter" (no parts), the
  // key of its one group.
  static Result<std::string> PrefixOf(const Family& family,
                                      std::span<const std::string_view> parts);

  // The names of `family`'s aggregates when it has several (Page::names), else none.
  static std::vector<std::string> Names(const Family& family);

  // The live groups of `family` whose key starts with `prefix` (from PrefixOf), in key
  // byte order, after `cursor` (a key from a previous page; empty = from the start), at
  // most `limit`. A group read as 0 (deleted meanwhile) is left out.
  Result<Page> List(Family& family, std::string_view prefix, std::string_view cursor, size_t limit);

  // The `k` largest groups of `family` under `prefix`, largest first (ties by key); by the
  // value of its first aggregate for a counter that is not one integer (NULL lowest).
  Result<Page> Top(Family& family, std::string_view prefix, size_t k);

  // The time buckets of one group of `family` whose start lies in [from, to), taken together
  // as RangeSum says (counts and sums added, distinct values united, min and max over all):
  // `parts` are the values of every key column but the time bucket, in order (spelled as
  // key_part.h says); `from` and `to` are instants written as ISO 8601 ("2024-05-01T00:00:00Z",
  // with an offset or none for UTC), the key spelling ("20240501T000000Z") or Unix seconds
  // ("1714521600"; eight digits are refused: "20240501" would be a date as much as
  // seconds). Costs one step of the family index per bucket of the group within
  // [from, to) (or per bucket of the group when an instant lies outside years 0-9999 or is
  // not a whole second).
  Result<RangeSum> Range(Family& family, std::span<const std::string_view> parts,
                         std::string_view from, std::string_view to);

 private:
  DerivedKeyspace& keyspace_;
  const int64_t top_k_max_staleness_ms_;
};

}  // namespace tally::derived
