// The RocksDB database that holds tally's tables, shared by the single-node store
// (RocksDbStore) and the cluster's (ClusterTables): how it is opened, how a counter's value
// is encoded, the catalog, and which layout the database was created with.
//
// One column family, keys by their first byte:
//   'c' ...          counters (what follows 'c' is the layout's: see each store)
//   'm' name         metadata records of the store, 'm' "layout" among them
//   'k' name         catalog records (a definition's text)
//
// A counter's value is value:int64-le [deadline-ms:int64-le], the deadline only when the
// counter expires.
//
// The layout. A data directory is created for one mode and never opened in the other: the
// cluster's counter keys carry their slot, and its positions mean nothing to a CommitLog.
// The layout is recorded ('m' "layout") when the database is created. A database without
// the record but with other keys was written before layouts were recorded: single-node.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/commit_batch.h"
#include "engine/persistence.h"

namespace rocksdb {
class DB;
class Slice;
class Snapshot;
class Status;
}  // namespace rocksdb

namespace tally::storage {

inline constexpr char kCounterPrefix = 'c';
inline constexpr char kCounterPrefixEnd = 'd';  // every counter key is below it
inline constexpr char kMetaPrefix = 'm';
inline constexpr char kCatalogPrefix = 'k';

enum class TableLayout { kSingleNode, kCluster };
std::string_view TableLayoutName(TableLayout layout);

// The memtable's size unless a store is told otherwise: a checkpoint of half a million
// random counters fits in one, so it is one flush and one L0 file, not several
// (build/bin/checkpoint_bench).
inline constexpr size_t kDefaultWriteBufferBytes = 64 << 20;

struct TableOptions {
  std::string path;           // the database's directory; created when missing
  size_t write_buffer_bytes;  // RocksDB memtable
  size_t block_cache_bytes;   // read cache
};

// Opens (creating when missing) the database at options.path for `layout`. kInvalidArgument
// when it was created for the other layout, kIOError when RocksDB cannot open it.
Result<std::unique_ptr<rocksdb::DB>> OpenTables(const TableOptions& options, TableLayout layout);

// OkStatus, or kIOError saying `what` failed and why.
Status FromRocks(const rocksdb::Status& status, std::string_view what);

// A counter's stored value; the slice points into `buffer`.
rocksdb::Slice EncodeCounterValue(const engine::CounterRecord& record, char (&buffer)[16]);
// Decodes a stored value; kCorruption (naming `key`) when it has the wrong size.
Result<engine::CounterRecord> DecodeCounterValue(const rocksdb::Slice& value,
                                                 const rocksdb::Slice& key);

// Calls visitor.Put (LoadSource::kTables) for every counter, in key order, with its key
// less the first `key_prefix_bytes` bytes (the 'c' and whatever the layout adds).
Status LoadCounterTables(rocksdb::DB& db, size_t key_prefix_bytes, engine::LoadVisitor& visitor);
// The same for the counters whose stored keys lie in [begin, end), read from `snapshot`
// (nullptr: the latest state).
Status LoadCounterRange(rocksdb::DB& db, size_t key_prefix_bytes, const std::string& begin,
                        const std::string& end, const rocksdb::Snapshot* snapshot,
                        engine::LoadVisitor& visitor);

// Writes a checkpoint's batch without RocksDB's WAL (a store makes it durable by a flush):
// clear_all() deletes every counter, then the deletes and the puts (the puts in key order; a
// key put twice ends with its later value), each counter under counter_key(its key).
Status WriteCheckpointBatch(rocksdb::DB& db, const engine::CommitBatch& batch,
                            std::string (*counter_key)(std::string_view));

// The catalog of engine/persistence.h, for either layout: WriteCatalog is atomic and synced.
Status WriteCatalog(rocksdb::DB& db, std::span<const engine::Persistence::CatalogOp> ops);
Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog(rocksdb::DB& db);

}  // namespace tally::storage
