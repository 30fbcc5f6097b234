// Applier: the apply path of the derived layer. It takes a batch of changes already
// decoded into rows of their sources, runs the universal formula of every counter on each
// change's source, and writes the resulting increments atomically: every key the batch
// touches is locked in one View and written in it, one commit epoch, so the batch is
// visible together and durable together, or not at all. What makes a batch count exactly
// once is written in the same View: idempotency markers ("\0id:<id>", see
// derived_keyspace.h) or position records ("\0pos:<name>").
//
// The applier does not know where changes come from: a push body decoded by the caller
// (ApplyChanges), a transaction of a database's change stream (ApplyPositioned, the name
// of whose position record is the caller's choice), or any other ordered stream of
// batches that records its position with the counters the same way.
//
// The write, for both shapes. Increments are summed per key; every sum is checked against
// the key's value before anything is written (an overflow refuses the whole batch); a
// group whose value returns to 0 is deleted; the family index follows (family.h). An
// increment for a time bucket already past its counter's retention is skipped, decided
// under the keys' locks with the clock read there, so that a late change never brings a
// swept bucket back with a partial value.
//
// Callers: DerivedCounters — Push (ApplyChanges), ApplyTransaction and ApplyBackfill
// (ApplyPositioned, one part per source, named by the source).
//
// Thread-safety: any thread, concurrently; the applier has no state of its own beyond
// per-thread scratch. REQUIRES: the caller holds DerivedCounters' apply lock (shared, or
// exclusive) for the call, so that no DDL or start change happens mid-batch, and
// `catalog` is a snapshot taken under it. The applier takes stripe locks (one View, or all
// stripes for a batch with a TRUNCATE) and family index mutexes inside them.
//
// Errors: kInvalidArgument "change N: ..." for a row the formula refuses, kOverflow for a
// counter the batch would take out of the int64 range. Nothing is written then, with one
// exception: in a positioned batch with a TRUNCATE, each stretch between TRUNCATEs is
// checked and written in turn, so an overflow in a later stretch leaves the earlier ones
// written (without the position record).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/value.h"
#include "engine/derived/catalog_snapshot.h"
#include "engine/derived/change_json.h"
#include "engine/keyspace.h"

namespace tally::derived {

// The outcome of one batch.
struct PushOutcome {
  size_t changes = 0;           // changes in the request
  size_t applied = 0;           // changes applied now
  size_t duplicates = 0;        // changes skipped: their id (or the batch's) was seen before
  size_t increments = 0;        // counter keys written
  size_t expired = 0;           // increments skipped: their time bucket is past retention
  uint64_t required_epoch = 0;  // the reply may leave once this epoch is durable
};

// One change of a source's own change stream (PostgreSQL logical replication): rows in
// the source's schema order, or a TRUNCATE of the source (every counter on it back to 0).
struct SourceRowChange {
  std::optional<std::vector<definitions::Value>> old_row;
  std::optional<std::vector<definitions::Value>> new_row;
  bool truncate = false;
};

// One part of a positioned batch: changes of one source and the position record that
// says whether they are counted. Views of the caller's data, which must live for the call.
struct PositionedPart {
  const SourceEntry* source = nullptr;  // of the snapshot passed with the part
  std::span<const SourceRowChange> changes;
  std::string_view position_name;  // the record "\0pos:<position_name>"
};

// One partition a cluster node writes, for ApplyShares: the partition, and the name of the
// position record (in the partition's slots) that says how far its share of the cluster's
// change stream is applied.
struct PartitionShare {
  uint32_t partition = 0;
  std::string_view position_name;
  // With a SourceFence: the name of the partition's fence records (PositionKey of it and
  // ":claim", ":lsn", ":part"), kept beside its counters as its position record is.
  std::string_view fence_name;
};

// The fence of a message a PostgreSQL source's consumer put in a cluster's change stream
// (cluster/change_feed.h): several consumers may have put the same transactions there, one
// after the other (a consumer replaced while its last messages were in flight), and only
// one order of them may count. A partition applies such a message when `claim` is at least
// the claim it last applied from, and its (lsn, part) is past the last it applied
// (lsn 0: a backfill chunk or a reset, not ordered: only the claim is checked). Each
// consumer's messages are a gapless run in LSN order, and a newer consumer's claim is
// larger, so a transaction is counted once in every partition whatever the interleaving.
struct SourceFence {
  int64_t claim = 0;  // the consumer's claim: its term as partition 0's owner
  int64_t lsn = 0;    // the transaction's commit end LSN; 0: not ordered
  int64_t part = 0;   // a transaction cut into several messages: which one, from 1
};

// Where a message of a cluster's change stream lies, for ApplyShares and DeleteShares.
struct ShareOrder {
  int64_t position = 0;  // its sequence: a share whose position record is at or past it is done
  int64_t limit = 0;     // counters whose start is at or past it do not move
  std::optional<SourceFence> fence;  // a source's message: see SourceFence
};

class Applier {
 public:
  // `keyspace` must outlive the applier. Markers live `idempotency_window_ms`.
  Applier(engine::Keyspace& keyspace, int64_t idempotency_window_ms)
      : keyspace_(keyspace), idempotency_window_ms_(idempotency_window_ms) {}

  // Applies `changes`, made idempotent by ids: a change whose id has a marker (or repeats
  // an id of this batch) is skipped; with a `batch_id` whose marker stands, nothing is
  // applied and every change counts as a duplicate. The markers of the changes applied,
  // and the batch's, are written with the increments. Pending counters
  // (Family::start == kPendingStart) are not moved; with `only_counter`, that counter
  // alone moves (a backfill push). REQUIRES: every change's source is of `catalog`;
  // `only_counter` empty or a counter of `catalog`.
  Result<PushOutcome> ApplyChanges(const CatalogSnapshot& catalog,
                                   std::span<const DecodedChange> changes,
                                   std::string_view batch_id, std::string_view only_counter);

  // Applies the parts of one position of an ordered stream: a part whose position record
  // is at or past `position` was counted before and is skipped (counted as duplicates);
  // the others apply, and their records are set to `position`, in the same View. Changes
  // apply in order, part after part; a TRUNCATE deletes every group of its source's
  // counters at its place in that order. A counter whose start is at or past `position`
  // is not moved (its backfill's snapshot holds the change). With `position` 0 (a
  // backfill chunk) no record is read or written and only pending counters are left out;
  // with `only_counter`, that counter alone moves. REQUIRES: the parts' sources are of
  // `catalog`; `only_counter` empty or a counter of `catalog`.
  Result<PushOutcome> ApplyPositioned(const CatalogSnapshot& catalog,
                                      std::span<const PositionedPart> parts, int64_t position,
                                      std::string_view only_counter);

  // A cluster node's shares of one message of the cluster's ordered change stream: of the
  // increments of `changes`, those whose key falls in one of `shares` (`partition_of`
  // names a key's partition) that are due are written, all in one View. A share is due
  // when its position record is below order.position and, with a fence, the fence allows
  // it (SourceFence; with a fence the position record may equal order.position: the
  // segments of one message, each a transaction, share its position); a due share's records are set
  // (the position to order.position, the fence's to the fence), and a share whose position is below
  // but whose fence refuses has its position set, and its claim when the message's is not older (a
  // transaction counted before, sent again by a newer consumer). Counters whose start is at or past
  // order.limit do not move.
  // Each partition's increments and records land in its stream together, as one commit's
  // share. A share whose sums would overflow is written without them (its records still
  // move: the change counts nothing there) and reported in `overflowed`; only plain
  // counters are offered (kInvalidArgument for one with record deltas, nothing written).
  // REQUIRES: as ApplyChanges.
  Result<PushOutcome> ApplyShares(const CatalogSnapshot& catalog,
                                  std::span<const DecodedChange> changes, const ShareOrder& order,
                                  std::string_view only_counter,
                                  std::span<const PartitionShare> shares,
                                  const std::function<uint32_t(std::string_view key)>& partition_of,
                                  std::vector<uint32_t>* overflowed);

  // A reset or a TRUNCATE in a cluster's change stream: in each due share (as ApplyShares
  // decides), every group of `families` whose key falls in its partition is deleted (and
  // leaves the family's index), then the share's records are set. Families whose start is at
  // or past order.limit are left alone, as a single node's TRUNCATE leaves them (a counter
  // backfilling from a later snapshot, a pending one). The deletes go in chunks of Views,
  // the records last, so a reset cut short is done again whole (deleting is idempotent); the
  // caller has them committed. REQUIRES: plain families; the caller holds the apply lock and
  // is the only writer of the shares' records.
  void DeleteShares(std::span<Family* const> families, const ShareOrder& order,
                    std::span<const PartitionShare> shares,
                    const std::function<uint32_t(std::string_view key)>& partition_of);

  // tally verify's repair in a cluster's change stream: of `values` (groups of the plain
  // `family`, each set to its value, 0 deleting it), those whose key falls in a due share (as
  // ApplyShares decides; no fence) are set, and the due shares' records move, in one View. A
  // share with no group of `values` only moves its records: a marker of a position in the
  // stream (cluster/change_feed.h). kInvalidArgument, nothing written, when a key is not a
  // group of `family` or `family` keeps records. REQUIRES: the caller holds the apply lock
  // and is the only writer of the shares' records.
  // What SetShares refuses of `values`, checked alone (the node that takes the repair).
  static Status CheckGroupValues(const Family& family, std::span<const KeyValue> values);
  Result<uint64_t> SetShares(Family* family, std::span<const KeyValue> values,
                             const ShareOrder& order, std::span<const PartitionShare> shares,
                             const std::function<uint32_t(std::string_view key)>& partition_of);

  // The keys the formula would write for `changes` (each once, in no order), nothing
  // written: what a cluster node checks and waits for before it answers a push.
  Result<std::vector<std::string>> PlanKeys(const CatalogSnapshot& catalog,
                                            std::span<const DecodedChange> changes,
                                            std::string_view only_counter);

 private:
  engine::Keyspace& keyspace_;
  const int64_t idempotency_window_ms_;
};

}  // namespace tally::derived
