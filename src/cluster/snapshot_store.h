// SnapshotStore: partitions' snapshots in a JetStream stream (issue 14; the messages are in
// snapshot_codec.h). A partition's owner writes one from its tables after a checkpoint, so
// that its stream can be trimmed below it; a node whose stream no longer holds the records
// after its position (a new node, one that was down while the stream was trimmed, one that
// forgets a lost partition) reads the newest one and follows the stream from its position.
//
// The stream holds, per partition, the newest complete snapshot (older ones and unfinished
// ones are purged once a newer manifest is in), replicated like the partition streams; and
// the newest catalog snapshot, which bounds the cluster's change stream the same way.
//
// Threads: any; calls block on JetStream (Write waits for each chunk's acknowledgement, Read
// streams them). Independent calls may run at once (the connection is thread-safe).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cluster/nats_client.h"
#include "cluster/snapshot_codec.h"
#include "core/status.h"
#include "engine/commit_batch.h"
#include "storage/cluster_tables.h"

namespace tally::cluster {

struct SnapshotStoreOptions {
  std::string stream;               // e.g. TALLY_SNAPSHOTS
  std::string subject_prefix;       // e.g. "tally.snap.": partition p's are <prefix><p>.c and .m
  size_t chunk_bytes = 256 * 1024;  // a chunk's record is cut past this many bytes
  int64_t publish_timeout_ms = 5000;
};

class SnapshotStore {
 public:
  // REQUIRES: `connection` outlives it; the stream exists.
  SnapshotStore(NatsConnection& connection, SnapshotStoreOptions options)
      : connection_(connection), options_(std::move(options)) {}

  // Publishes partition `partition` as `view` holds it (its counters and saved position),
  // then its manifest, then purges the partition's older snapshots. kInvalidArgument when
  // the view has no position for it (never checkpointed); the NATS error otherwise.
  Result<SnapshotManifest> Write(const storage::ClusterTablesView& view, uint32_t partition);

  // The manifest of the partition's newest complete snapshot; nullopt when there is none.
  Result<std::optional<SnapshotManifest>> Latest(uint32_t partition);

  // Reads the chunks `manifest` names, in order, and hands each one's batch to `chunk` (the
  // first one clears the partition); stops at the first error `chunk` returns. kNotFound
  // when a chunk is gone (a newer snapshot replaced it meanwhile: ask Latest again),
  // kUnavailable when none arrives for publish_timeout_ms, kCorruption when one does not
  // decode or does not belong.
  Status Read(const SnapshotManifest& manifest,
              const std::function<Status(engine::CommitBatch& batch)>& chunk);

  // Whether the stream still holds `manifest`'s first and last chunks (nats-server 2.9.10
  // was seen to drop a stream's front after its servers were killed again and again: a
  // manifest may outlive its chunks). False also for a chunk there of another snapshot.
  Result<bool> Whole(const SnapshotManifest& manifest);

  // The catalog snapshot (snapshot_codec.h): WriteCatalog publishes one and purges the older
  // ones; LatestCatalog reads the newest (nullopt: none yet).
  Status WriteCatalog(const CatalogSnapshot& snapshot);
  Result<std::optional<CatalogSnapshot>> LatestCatalog();

  // Subjects of partition p's chunks and manifests.
  std::string ChunkSubject(uint32_t partition) const;
  std::string ManifestSubject(uint32_t partition) const;

 private:
  NatsConnection& connection_;
  const SnapshotStoreOptions options_;
};

}  // namespace tally::cluster
