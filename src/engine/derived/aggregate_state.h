// The hidden state of counters beyond a plain count or sum: count(DISTINCT x), min(x),
// max(x), avg(x) and counters of several aggregates (definitions' Layout kDistinct and
// kComposite; aggregate.h there says what one row adds to a group's state).
//
// Design.
//
// Everything durable is a plain int64 counter of the engine's keyspace, written in the
// same View (so the same commit epoch) as the batch that changed it, like every derived
// value. A group of such a counter is its visible key K ("<counter>:<part>:...") and its
// hidden records:
//
//   record := "\0agg:" <length of K, decimal> ":" K tag
//   tag    := <i> "s"                 the sum of aggregate i's argument (sum, avg), in
//                                     units of its scale
//           | <i> "n"                 its rows whose argument is not NULL (count(x), sum,
//                                     avg)
//           | <i> "v" <ValueBytes>    its rows whose argument is that value
//                                     (count(DISTINCT x), min, max)
//
// where i is the aggregate's index in the select list, from 0, in decimal (the tag is
// definitions::RecordTag, spelled by AppendRecordTag, read by ParseRecordTag). The length
// prefix makes the record's group readable back whatever bytes K holds. A record is never
// 0: a record back at 0 is deleted. K holds what plain reads (GET, SCAN, subscriptions,
// the hot keys) see of the group:
//
//   kDistinct   K = the number of distinct values: the "v" records with rows above 0
//   kComposite  K = the group's rows passing WHERE, kept by ±1 a row; so a group exists
//               exactly while it has rows, as in PostgreSQL's GROUP BY (a group of only
//               NULL arguments has min, max and avg NULL)
//
// K is written whenever any record of its group is, with its value unchanged if need be:
// K's commit epoch then covers the whole group, so a read that waits for K's epoch waits
// for every record it shows, and a subscriber to K hears of every change of the group. When
// K's value is 0 but records remain (only changes that do not add up do that: a delete of
// a row never counted, or changes applied out of their order), K is kept, holding 0, so
// that the group stays in its family's index until the records are gone; a read shows a
// group at 0 as no group. K goes when it is 0 and the group has no record left.
//
// Hidden. The records start with a NUL byte, as the idempotency markers do: IsInternalKey
// (derived_keyspace.h) is true for them, so plain writes are refused, SCAN, KEYS, hot keys
// and subscriptions leave them out.
//
// In memory, GroupStates mirrors every record of a family (its index by group, each
// group's sums, counts and values with their rows in an ordered map), from which the reads
// show min, max and avg without reading the records, and a min or max falls back to the
// next value in O(log n) when its value's last row goes. It is rebuilt from the keyspace at
// Load (LoadRecord, from the scan that rebuilds the family indexes) and changed only with
// the records themselves, under the stripes of K and of the records and the family's index
// mutex; so a reader that holds K's stripe and the mutex sees the state of K's epoch.
//
// Removal. Whatever removes a group (a truncate, a drop, a reset, a repair, the retention
// sweep, FLUSHALL) removes K and its records together, in one View: RecordKeysOf lists the
// records of a group from the mirror.
//
// Thread-safety: GroupStates is guarded by its family's index mutex (Family::mutex); every
// method REQUIRES it held.
#pragma once

#include <absl/container/btree_map.h>
#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/aggregate.h"
#include "engine/definitions/program.h"

namespace tally::derived {

inline constexpr std::string_view kRecordPrefix{"\0agg:", 5};

// The record key of one record of `group` (see above).
std::string RecordKey(std::string_view group, uint32_t aggregate, definitions::RecordKind kind,
                      std::string_view value);

// A record key read back: views of the key.
struct RecordName {
  std::string_view group;
  uint32_t aggregate = 0;
  definitions::RecordKind kind = definitions::RecordKind::kSum;
  std::string_view value;  // kValue's ValueBytes
};
// nullopt for a key that is not a well-formed record key.
std::optional<RecordName> ParseRecordKey(std::string_view key);

// The state of one aggregate of one group: the records of its index.
struct AggregateState {
  int64_t sum = 0;    // "s"
  int64_t count = 0;  // "n"
  // "v": rows per value (never 0), in value order; and how many have rows above 0.
  absl::btree_map<std::string, int64_t> values;
  int64_t present = 0;
};

// The state of one group: one AggregateState per aggregate of its counter.
struct GroupState {
  std::vector<AggregateState> aggregates;
  size_t records = 0;  // its records (non-zero sums, counts and values)
};

// The value of a group in `state` (nullptr: no record) whose K holds `k_value`, each
// aggregate shown from its state (an aggregate without a value, NULL); kDistinct shows K.
definitions::GroupValue ShowGroup(const definitions::CompiledCounter& counter,
                                  const GroupState* state, int64_t k_value);

// One group's whole state as a repair sets it (tally verify --repair; DerivedKeyspace::
// SetGroupStates): what its key K holds and every record it keeps; a record it does not
// list is 0 (deleted).
struct GroupStateValue {
  struct Record {
    std::string tag;    // definitions::RecordTag's spelling: "0s", "1n", "2v<ValueBytes>"
    int64_t value = 0;  // never 0
  };
  std::string key;  // the group's canonical key
  // What K holds: the group's rows (kComposite) or its number of distinct values, the "v"
  // records (kDistinct). 0 with no records: the group goes.
  int64_t value = 0;
  std::vector<Record> records;
};

// Checks that `state` is a state a group of `counter` can have (kInvalidArgument naming the
// group and saying why not): every tag well-formed, kept by its aggregate (CheckRecordTag)
// and given once; counts of rows above 0, sums not 0; a sum with its count; kDistinct: K is
// the number of values; kComposite: K is the group's rows, above 0 when it has records, and
// no aggregate counts more rows than that. REQUIRES: `counter` is not plain.
Status CheckGroupState(const definitions::CompiledCounter& counter, const GroupStateValue& state);

// The records of one family, mirrored (see above). One per family of layout kDistinct or
// kComposite; Family::states.
class GroupStates {
 public:
  // `counter` must outlive this object (the family's own).
  explicit GroupStates(const definitions::CompiledCounter& counter) : counter_(counter) {}

  // The state of `group`; nullptr when it has no record.
  const GroupState* Find(std::string_view group) const;
  // The current value of one record (0 when it has none).
  int64_t Record(std::string_view group, uint32_t aggregate, definitions::RecordKind kind,
                 std::string_view value) const;
  // Sets one record to `value` (0 removes it), keeping the present counts: a value counts as
  // present while its rows are above 0.
  void SetRecord(std::string_view group, uint32_t aggregate, definitions::RecordKind kind,
                 std::string_view value, int64_t new_value);
  // The number of distinct values of aggregate `aggregate` of `group`.
  int64_t Present(std::string_view group, uint32_t aggregate) const;

  // Appends the record keys of `group` to `out`.
  void RecordKeysOf(std::string_view group, std::vector<std::string>* out) const;
  // Forgets `group`'s records (the caller deletes them from the keyspace).
  void Erase(std::string_view group);
  void Clear();

  // The value of `group` whose K holds `rows` (kComposite) or its distinct count
  // (kDistinct): each aggregate shown from the records (an aggregate without a value, NULL).
  definitions::GroupValue Show(std::string_view group, int64_t k_value) const;
  size_t groups() const { return groups_.size(); }

 private:
  GroupState& Slot(std::string_view group);

  const definitions::CompiledCounter& counter_;
  absl::flat_hash_map<std::string, GroupState> groups_;
};

// Groups of one family taken together as if their rows were one group's: the time buckets
// of a group in a range read. Rows, counts and sums add up, distinct values unite (a value
// counts when some group has rows of it), a min or a max is the extreme of the groups' own;
// so the combination of a group's buckets is the group's value over their rows. Each group
// adds O(log n) per value it brings: one for a min or a max, every value it has for a
// count(DISTINCT). Not thread-safe; Add reads the mirror as GroupStates' methods do.
class GroupCombination {
 public:
  // `counter` must outlive this object.
  explicit GroupCombination(const definitions::CompiledCounter& counter);

  // Adds `group` of `states`, whose K holds `k_value`. False, the combination then
  // unspecified, when a count or a sum leaves the int64 range. REQUIRES: the family's index
  // mutex.
  bool Add(const GroupStates& states, std::string_view group, int64_t k_value);

  // The combined value, as GroupStates::Show shows a group.
  definitions::GroupValue Show() const;

 private:
  const definitions::CompiledCounter& counter_;
  GroupState combined_;
  int64_t k_value_ = 0;  // kComposite: the rows added up
};

}  // namespace tally::derived
