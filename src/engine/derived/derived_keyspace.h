// The derived layer's records in the engine's keyspace, and its bulk access to them.
//
// Every record the derived layer keeps in the keyspace is a plain counter there, so it is
// durable, recovered and expired like any other:
//   <counter>:<part>:...  a group of a derived counter (definitions/value.h: EncodeKey);
//                         its value is the group's aggregate, never 0 (a group back at 0
//                         is deleted)
//   <counter>             the one group of a derived counter without key columns (no
//                         GROUP BY), the same way
//   \0id:<id>             an idempotency marker: 1, expiring after the idempotency
//                         window; the change or batch with this id is counted
//   \0pos:<name>          a position record: every change of the source (or stream)
//                         <name> up to this position is counted, e.g. a commit LSN
//   \0agg:<n>:<group>...  a hidden record of a group of a counter that is not a plain
//                         count or sum: count(DISTINCT), min, max, avg, several
//                         aggregates (aggregate_state.h has the format and the design)
// No counter name holds a NUL byte, so no group starts like a marker or a position; plain
// writes to either are refused and listings of the keyspace hide them. Other keys that
// start with a NUL byte are ordinary binary keys.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/derived/family.h"
#include "engine/engine.h"
#include "engine/persistence.h"

namespace tally::derived {

inline constexpr std::string_view kIdMarkerPrefix{"\0id:", 4};
inline constexpr std::string_view kPositionPrefix{"\0pos:", 5};
// True for a marker, a position record or a hidden record of a group (kRecordPrefix,
// aggregate_state.h): tally's own, not a counter of anybody's.
inline bool IsInternalKey(std::string_view key) {
  return key.starts_with(kIdMarkerPrefix) || key.starts_with(kPositionPrefix) ||
         key.starts_with(kRecordPrefix);
}
// "\0id:<id>".
std::string MarkerKey(std::string_view id);
// "\0pos:<name>".
std::string PositionKey(std::string_view name);
// The counter name a group key would belong to: what precedes its first ':', or the whole
// key when it has none (the group of a counter without key columns). A derived counter
// owns every key whose FamilyName is its name.
std::string_view FamilyName(std::string_view key);

// Keys per View when keys are deleted or read in bulk: bounds how long a stripe is held.
inline constexpr size_t kChunk = 1024;

// DerivedKeyspace: the bulk operations of the derived layer on the engine's keyspace. It
// reads and deletes many keys a chunk (kChunk keys) at a time, one View per chunk; sets a
// family's groups to given values, or to given states with their hidden records, in one
// View (the repair of tally verify); reads and
// forgets position records; and waits for durability. The apply path (apply.h) writes
// through Views of its own, since a batch must be one View.
//
// Callers: the parts of the derived layer and DerivedCounters (Get, Repair, SourcePosition).
//
// Thread-safety: any thread, concurrently. It takes stripe locks (Views) and, inside them,
// a family's index mutex; it takes no lock of the derived layer, so its callers decide
// what must not change meanwhile (DerivedCounters' apply lock).
class DerivedKeyspace {
 public:
  // `engine` (started) and `store` must outlive this object.
  DerivedKeyspace(engine::Engine& engine, engine::Persistence& store)
      : engine_(engine), store_(store) {}

  engine::Keyspace& keyspace() { return engine_.keyspace(); }
  // Now by the keyspace's clock, in Unix milliseconds.
  int64_t NowMillis() { return keyspace().clock()->NowMillis(); }

  // Values of `keys` (missing = 0), in order. `required_epoch` is raised to the epoch the
  // values depend on.
  std::vector<int64_t> Get(std::span<const std::string> keys, uint64_t* required_epoch);

  // The groups `keys` of `family` (missing = 0) with their values as shown (KeyValue), in
  // order: each group's key and its hidden records read together, under the key's stripe
  // and the family's index mutex. `required_epoch` is raised as by Get.
  std::vector<KeyValue> ReadGroups(Family& family, std::span<const std::string> keys,
                                   uint64_t* required_epoch);

  // Calls visit(i, value, states) for each group keys[i] of `family` (missing = 0), in
  // order, under the key's stripe; for a counter with hidden records `states` is the
  // family's mirror, read under its index mutex, held during the call (so it shows the
  // group as of the key's epoch), else nullptr. `required_epoch` is raised as by Get.
  using GroupVisit = std::function<void(size_t i, int64_t value, const GroupStates* states)>;
  void VisitGroups(Family& family, std::span<const std::string> keys, uint64_t* required_epoch,
                   const GroupVisit& visit);

  // Deletes `keys`; durable when it returns.
  void DeleteKeys(std::span<const std::string> keys);
  // Deletes every group of `family`, with its hidden records, and empties its index
  // (DeleteKeys).
  void DeleteGroups(Family& family);
  // Sets groups of `family` to the given values (0 deletes the group), all in one View,
  // keeping the index in step. kInvalidArgument, nothing written, when a key is not a
  // group of `family`, or when `family` is not a plain counter (its groups are not one
  // number each: SetGroupStates). Returns the epoch to wait for.
  Result<uint64_t> SetGroups(Family& family, std::span<const KeyValue> values);
  // Sets whole groups of `family`, a counter that is not plain: each group's key and every
  // record of it (a record the new state does not list is deleted; a state of value 0
  // without records deletes the group), all in one View, keeping the index and the mirror
  // (GroupStates) in step, as the apply path does. kInvalidArgument, nothing written, when
  // `family` is plain, a key is not a group of it or is given twice, or a state is not one
  // a group can have (CheckGroupState). Returns the epoch to wait for.
  Result<uint64_t> SetGroupStates(Family& family, std::span<const GroupStateValue> states);

  // The position recorded under `name`; 0 when none.
  int64_t Position(std::string_view name);
  // Deletes the position record of `name`; durable when it returns.
  void ForgetPosition(std::string_view name);

  // Blocks until `epoch` is durable, committing on this thread when nobody else is. In
  // async durability the store is synced too: what waits here (DDL steps, resets, sweeps)
  // must survive a crash of the machine whatever the durability of plain writes. Returns
  // at once when `epoch` is 0 (nothing was written).
  void WaitDurable(uint64_t epoch);

 private:
  engine::Engine& engine_;
  engine::Persistence& store_;
};

}  // namespace tally::derived
