// The messages of a partition's snapshot in JetStream (issue 14): what an owner publishes
// to bound the replay of its partition's stream, and what a node without the stream's
// early records reads instead of them. No NATS here (the fuzzer links it alone, in
// tally_cluster_records); snapshot_store.h moves them.
//
// A snapshot of partition p is the partition's counters as a node's tables held them with
// the stream position they were saved with (storage::ClusterTablesView):
//   chunks   on <name>.snap.<p>.c, in order: a text line "tally-snapshot-chunk 1 <id>
//            <index>", then one kBatch record (record_codec.h) of puts, the first one
//            also clearing the partition
//   manifest on <name>.snap.<p>.m, published once every chunk is in the stream: the
//            lines "name value" of SnapshotManifest (EncodeManifest), so that the stream's
//            last manifest on a subject names the newest complete snapshot
// A snapshot whose writer died before its manifest is never read: its chunks are purged
// with the older snapshots.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "storage/stream_position.h"

namespace tally::cluster {

// What a snapshot's manifest says of it.
struct SnapshotManifest {
  uint32_t partition = 0;
  uint64_t id = 0;                   // drawn by its writer; every chunk carries it
  storage::StreamPosition position;  // replaying the partition's stream after it makes it exact
  uint64_t first_seq = 0;            // the stream sequences of its first and last chunk
  uint64_t last_seq = 0;
  uint64_t chunks = 0;
  uint64_t counters = 0;
};

std::string EncodeManifest(const SnapshotManifest& manifest);
// Refuses anything that is not exactly a manifest (kCorruption).
Result<SnapshotManifest> DecodeManifest(std::string_view bytes);

// A chunk's first line (with its line break).
std::string EncodeChunkPrefix(uint64_t id, uint64_t index);
// A chunk: its id and index, and the record after the line. kCorruption when the line is
// malformed.
struct SnapshotChunk {
  uint64_t id = 0;
  uint64_t index = 0;
  std::string_view record;
};
Result<SnapshotChunk> DecodeChunk(std::string_view bytes);

// A node's catalog as it stood once it had run the cluster's change stream up to `seq`: its
// catalog records (the derived counters' definitions and states, engine/derived/
// catalog_records.h, and the change feed's "cluster/..." ones), published on
// <name>.snap.catalog so that the change stream can be trimmed below it. A node whose
// catalog position is no longer in the change stream (a new node, one down while it was
// trimmed) starts from it. One message:
//   "tally-catalog 1 <seq> <records>\n", then each record "<name length> <value length>
//   <name><value>\n" (names and values may hold any byte).
struct CatalogSnapshot {
  uint64_t seq = 0;
  std::vector<std::pair<std::string, std::string>> records;
};
std::string EncodeCatalogSnapshot(const CatalogSnapshot& snapshot);
// Refuses anything that is not exactly a catalog snapshot (kCorruption).
Result<CatalogSnapshot> DecodeCatalogSnapshot(std::string_view bytes);

}  // namespace tally::cluster
