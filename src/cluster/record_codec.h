// The records of a partition's stream: what an owner publishes and every reader decodes.
//
// One NATS message per record. A partition's stream holds, in order: the claim that began
// an ownership, then that owner's batches (the final values of the keys its commits
// changed) and renewals, then the next owner's claim, and so on. The byte grammar is at
// the top of record_codec.cc.
//
// Ownership and fencing: a record's header names the ownership it belongs to, the `term`
// (the stream sequence of the claim that began it) and the `writer` (a random number the
// claimer drew for that claim). A batch or renewal counts only when both equal those of
// the latest claim before it in the stream (see OwnershipFilter): a fenced owner's records
// that were in flight behind a refused one can still land after a newer claim (their
// expected sequences may happen to match), and they must be ignored by everyone.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/slot.h"
#include "core/status.h"
#include "engine/commit_batch.h"

namespace tally::cluster {

enum class RecordKind : uint8_t {
  kBatch = 1,  // counters' final values, deletes, and "clear the partition"
  kClaim = 2,  // a node takes the partition over (the first record of an ownership)
  kRenew = 3,  // an owner shows it is alive and still owns the partition
  kPart = 4,   // a part of a group: a batch too large for one record is published as parts
               // with consecutive sequences, the last of them a kBatch; a group counts only
               // whole (a group without its last record at the tail was never acknowledged)
};

// "batch", "claim", "renew", "part": the value of the Tally-Kind header, for people reading a
// stream with NATS tools.
std::string_view RecordKindName(RecordKind kind);

// What every record starts with.
struct RecordHeader {
  uint32_t partition = 0;
  uint64_t term = 0;          // stream sequence of the claim this ownership began with
  uint64_t writer = 0;        // the random number that claim drew; never 0
  uint64_t epoch = 0;         // the owner's commit epoch (diagnostics)
  int64_t owner_unix_ms = 0;  // the owner's clock when it wrote (display only, never expiry)
};

// A claim's body: who owns the partition from this record on, and where to reach it.
struct ClaimBody {
  std::string node_name;
  std::string node_id;         // 40 hex characters
  std::string redis_address;   // host:port, what MOVED names
  std::string http_address;    // host:port
  uint64_t caught_up_to = 0;   // the last sequence the claimer had applied (= term - 1)
  uint64_t previous_term = 0;  // the term it took over from (0: the stream had no owner)
};

// A decoded record. `batch` is filled for kBatch and kPart, `claim` for kClaim.
struct Record {
  RecordKind kind = RecordKind::kBatch;
  RecordHeader header;
  engine::CommitBatch batch;
  ClaimBody claim;
};

// The operations of one CommitBatch that belong to one partition: indexes into the batch's
// deletes and puts, and whether the partition is cleared first.
struct BatchShare {
  bool clear = false;
  std::vector<uint32_t> deletes;
  std::vector<uint32_t> puts;

  bool empty() const { return !clear && deletes.empty() && puts.empty(); }
  size_t operations() const { return (clear ? 1 : 0) + deletes.size() + puts.size(); }
  // Every operation of `batch`.
  static BatchShare All(const engine::CommitBatch& batch);
};

// Splits `batch` by the slot of each key into `partition_count` shares (index =
// partition, see core/slot.h). A clear goes into every share.
// REQUIRES: 0 < partition_count <= kMaxPartitions.
std::vector<BatchShare> SplitBatch(const engine::CommitBatch& batch, uint32_t partition_count);

// Each encoder replaces *out with one whole record. EncodeBatch writes a kBatch, or with
// `kind` = kPart a part of a group (the same body). REQUIRES: kind is kBatch or kPart.
void EncodeBatch(const RecordHeader& header, const engine::CommitBatch& batch,
                 const BatchShare& share, std::string* out, RecordKind kind = RecordKind::kBatch);
void EncodeClaim(const RecordHeader& header, const ClaimBody& claim, std::string* out);
void EncodeRenew(const RecordHeader& header, std::string* out);

// Decodes one record; Corruption when the bytes are not exactly one well-formed record
// with a matching checksum.
Result<Record> DecodeRecord(std::string_view bytes);

// Decides, record by record in stream order, which records count (see the top of this
// file). Start it with the ownership in force just before the first record it will see:
// {0, 0} at the start of a stream, or the ownership saved with a position.
class OwnershipFilter {
 public:
  OwnershipFilter() = default;
  OwnershipFilter(uint64_t term, uint64_t writer) : term_(term), writer_(writer) {}

  // True when the record at stream sequence `seq` counts. A claim always counts (it lands
  // only right after the tail its claimer expected) and becomes the ownership in force;
  // a claim whose term is not its own sequence is not a claim this protocol wrote, and
  // does not count.
  bool Accept(uint64_t seq, const Record& record);

  uint64_t term() const { return term_; }
  uint64_t writer() const { return writer_; }

 private:
  uint64_t term_ = 0;
  uint64_t writer_ = 0;
};

}  // namespace tally::cluster
