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
// No counter name holds a NUL byte, so no group starts like a marker or a position; plain
// writes to either are refused and listings of the keyspace hide them. Other keys that
// start with a NUL byte are ordinary binary keys.
#pragma once

#include <cstdint>
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
// True for a marker or a position record: tally's own, not a counter of anybody's.
inline bool IsInternalKey(std::string_view key) {
  return key.starts_with(kIdMarkerPrefix) || key.starts_with(kPositionPrefix);
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
// family's groups to given values in one View (the repair of tally verify); reads and
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

  // Deletes `keys`; durable when it returns.
  void DeleteKeys(std::span<const std::string> keys);
  // Deletes every group of `family` and empties its index (DeleteKeys).
  void DeleteGroups(Family& family);
  // Sets groups of `family` to the given values (0 deletes the group), all in one View,
  // keeping the index in step. kInvalidArgument, nothing written, when a key is not a
  // group of `family`. Returns the epoch to wait for.
  Result<uint64_t> SetGroups(Family& family, std::span<const KeyValue> values);

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
