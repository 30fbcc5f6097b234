// ClusterPersistence: the engine's Persistence on a cluster node (issue 13), with static
// ownership: the partitions this node writes are given at construction (`--cluster-own`);
// it follows every other one. Automatic claims, leases and failover (membership) come later
// and will replace the fixed set.
//
// The write path. Commit splits the batch by slot into one share per partition. A share of
// an owned partition is published to the partition's stream through its PartitionLog (a
// share over max_record_bytes as a group: kind-4 parts and a last kBatch); shares of
// partitions not owned (changes a follower applied from the stream) are dropped. Commit
// returns once every record it appended is durable (in the stream on a quorum): the
// engine's "durable" is the stream's. A fenced partition (another writer took its stream)
// fails the commit: its writes are never acknowledged.
//
// The local store (storage::ClusterTables) is a view of the streams: no fsync on the write
// path. A checkpoint records the owned partitions (ckpt_open), writes the counters, and
// finishes by writing every partition's position of the cut taken in CheckpointCut: a
// follower's applied position, an owner's last appended sequence (every commit drained
// before the cut has been appended and acknowledged, since commits run one at a time and
// wait). Load rebuilds every partition a leftover ckpt_open names, loads the tables, brings
// each owned partition up to its stream's tail (reading it like a follower), claims it at
// the tail, and starts a Follower for each other partition from its saved position.
//
// A restart of an owner republishes, in its first commit, the values it read from its own
// stream while catching up (they drain from the keyspace like any change): one batch of final
// values equal to the stream's, harmless.
//
// Threads: as engine/persistence.h. Attach before Load; the followers apply on threads of
// their own (Keyspace::ApplyReplicated). The partition streams must exist.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/follower.h"
#include "cluster/nats_client.h"
#include "cluster/partition_log.h"
#include "engine/persistence.h"
#include "storage/cluster_tables.h"

namespace tally::engine {
class Keyspace;
}  // namespace tally::engine

namespace tally::cluster {

struct ClusterPersistenceOptions {
  std::string data_dir;
  uint32_t partition_count = 0;
  std::vector<uint32_t> owned;              // the partitions this node writes
  std::string stream_prefix = "TALLY_P";    // partition p's stream: <stream_prefix><p>
  std::string subject_prefix = "tally.p.";  // and its subject: <subject_prefix><p>
  std::string node_name;
  size_t max_in_flight = 4;
  int64_t publish_timeout_ms = 2000;
  size_t max_record_bytes = 256 * 1024;
  int64_t catch_up_timeout_ms = 60000;  // Load's bound on reading an owned partition's tail
};

// The stream and subject of partition p under `options`' prefixes.
std::string PartitionStream(const ClusterPersistenceOptions& options, uint32_t partition);
std::string PartitionSubject(const ClusterPersistenceOptions& options, uint32_t partition);

class ClusterPersistence final : public engine::Persistence {
 public:
  // Opens the local store. kInvalidArgument for an owned partition out of range or a store
  // of another layout or partition count. REQUIRES: `connection` outlives it.
  static Result<std::unique_ptr<ClusterPersistence>> Open(NatsConnection& connection,
                                                          ClusterPersistenceOptions options);
  // Close()s.
  ~ClusterPersistence() override;

  // Stops the followers and the logs (records not yet durable stay unknown); Commit fails
  // from then on. The followers apply to the attached keyspace: stop the engine (its last
  // commit), then Close, then destroy the engine.
  void Close();

  // The keyspace the followers apply to. REQUIRES: called once, before Load; `keyspace`
  // outlives this object.
  void Attach(engine::Keyspace& keyspace);

  Status Commit(const engine::CommitBatch& batch, bool sync) override;
  Status Sync() override { return OkStatus(); }
  Status Load(engine::LoadVisitor& visitor) override;
  Result<uint64_t> BeginCheckpoint() override;
  Status CheckpointWrite(const engine::CommitBatch& batch) override;
  Status FinishCheckpoint(uint64_t token) override;
  void CheckpointCut(uint64_t token) override;
  engine::PersistenceStats stats() const override;
  Status WriteCatalog(std::span<const CatalogOp> ops) override;
  Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog() override;

  const std::string& node_id() const { return tables_->node_id(); }
  // The follower of a partition not owned (nullptr for an owned one, or before Load).
  const Follower* follower(uint32_t partition) const;
  // The log of an owned partition (nullptr for a followed one, or before Load).
  const PartitionLog* log(uint32_t partition) const;

 private:
  // An owned partition's writer: its log and the header of its records.
  struct Owned {
    std::unique_ptr<PartitionLog> log;
    RecordHeader header;
  };

  ClusterPersistence(NatsConnection& connection, ClusterPersistenceOptions options,
                     std::unique_ptr<storage::ClusterTables> tables);

  // Reads partition p from `from` to its stream's tail, then appends a claim there.
  Status CatchUpAndClaim(uint32_t partition, storage::StreamPosition from);
  // Appends one share as a record, or as a group when it is too large; returns the
  // sequence of its last record.
  Result<uint64_t> AppendShare(Owned& owned, const engine::CommitBatch& batch,
                               const BatchShare& share);
  FollowerOptions FollowerOptionsFor(uint32_t partition) const;

  NatsConnection& connection_;
  const ClusterPersistenceOptions options_;
  std::unique_ptr<storage::ClusterTables> tables_;
  std::unique_ptr<KeyspaceApplier> applier_;
  std::vector<Owned> owned_;                          // index = partition; log empty if followed
  std::vector<std::unique_ptr<Follower>> followers_;  // index = partition
  std::string encoded_;                               // Commit's

  std::mutex cut_mutex_;
  // Guarded by cut_mutex_: the positions of the cut of the checkpoint `cut_token_`.
  std::vector<storage::StreamPosition> cut_;
  uint64_t cut_token_ = 0;
  uint64_t next_token_ = 1;  // BeginCheckpoint's (one at a time)
};

}  // namespace tally::cluster
