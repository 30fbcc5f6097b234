#include "storage/table_format.h"

#include <fmt/format.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

namespace tally::storage {
namespace {

const std::string kLayoutKey = std::string(1, kMetaPrefix) + "layout";

// The layout a database records, or nullopt for a new (empty) one.
Result<std::optional<TableLayout>> StoredLayout(rocksdb::DB& db) {
  std::string stored;
  const rocksdb::Status status = db.Get(rocksdb::ReadOptions(), kLayoutKey, &stored);
  if (status.ok()) {
    for (TableLayout layout : {TableLayout::kSingleNode, TableLayout::kCluster}) {
      if (stored == TableLayoutName(layout)) return layout;
    }
    return Corruption(fmt::format("unknown store layout '{}'", stored));
  }
  if (!status.IsNotFound()) return tl::unexpected(FromRocks(status, "layout read").error());
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
  it->SeekToFirst();
  if (auto checked = FromRocks(it->status(), "layout read"); !checked) {
    return tl::unexpected(checked.error());
  }
  // Written before layouts were recorded, which only the single-node store did.
  if (it->Valid()) return TableLayout::kSingleNode;
  return std::nullopt;
}

}  // namespace

std::string_view TableLayoutName(TableLayout layout) {
  return layout == TableLayout::kCluster ? "cluster" : "single-node";
}

Result<std::unique_ptr<rocksdb::DB>> OpenTables(const TableOptions& options, TableLayout layout) {
  std::error_code error;
  std::filesystem::create_directories(options.path, error);
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.write_buffer_size = options.write_buffer_bytes;
  db_options.max_write_buffer_number = 2;
  db_options.IncreaseParallelism(2);
  // Only checkpoints write the tables, and they are read in full once, at start: an L0 file
  // more costs that one scan a merge step, a compaction fewer saves rewriting every counter
  // (random keys overlap the whole of L1). 8 (RocksDB's default is 4) and the 64 MiB memtable
  // (kDefaultWriteBufferBytes) together took a sixth off a checkpoint of random keys'
  // CPU (build/bin/checkpoint_bench; docs/benchmarks.md, "The tables' share").
  db_options.level0_file_num_compaction_trigger = 8;
  // The tables are never point-read (counters live in memory and are read from here once,
  // in order, at start), so an append-only vector memtable fits: an insert is an append
  // instead of a skip-list search, and the sort happens once, at flush.
  db_options.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  db_options.allow_concurrent_memtable_write = false;
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));

  rocksdb::DB* raw = nullptr;
  const rocksdb::Status status = rocksdb::DB::Open(db_options, options.path, &raw);
  if (!status.ok()) {
    return IOError(fmt::format("cannot open the store in {}: {}", options.path, status.ToString()));
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  auto stored = StoredLayout(*db);
  if (!stored) return tl::unexpected(stored.error());
  if (*stored && **stored != layout) {
    return InvalidArgument(
        fmt::format("the store in {} was created for {} mode and cannot be opened in {} mode",
                    options.path, TableLayoutName(**stored), TableLayoutName(layout)));
  }
  if (!*stored) {
    rocksdb::WriteOptions write_options;
    write_options.sync = true;
    if (auto written =
            FromRocks(db->Put(write_options, kLayoutKey, TableLayoutName(layout)), "layout write");
        !written) {
      return tl::unexpected(written.error());
    }
  }
  return db;
}

Status FromRocks(const rocksdb::Status& status, std::string_view what) {
  if (status.ok()) return OkStatus();
  return IOError(fmt::format("{}: {}", what, status.ToString()));
}

rocksdb::Slice EncodeCounterValue(const engine::CounterRecord& record, char (&buffer)[16]) {
  std::memcpy(buffer, &record.value, 8);
  std::memcpy(buffer + 8, &record.deadline_ms, 8);
  return rocksdb::Slice(buffer, record.deadline_ms != 0 ? 16 : 8);
}

Result<engine::CounterRecord> DecodeCounterValue(const rocksdb::Slice& value,
                                                 const rocksdb::Slice& key) {
  if (value.size() != 8 && value.size() != 16) {
    return Corruption(
        fmt::format("counter record of {} bytes under key '{}'", value.size(), key.ToString(true)));
  }
  engine::CounterRecord record;
  std::memcpy(&record.value, value.data(), 8);
  if (value.size() == 16) std::memcpy(&record.deadline_ms, value.data() + 8, 8);
  return record;
}

Status LoadCounterTables(rocksdb::DB& db, size_t key_prefix_bytes, engine::LoadVisitor& visitor) {
  return LoadCounterRange(db, key_prefix_bytes, std::string(1, kCounterPrefix),
                          std::string(1, kCounterPrefixEnd), nullptr, visitor);
}

Status LoadCounterRange(rocksdb::DB& db, size_t key_prefix_bytes, const std::string& begin,
                        const std::string& end, const rocksdb::Snapshot* snapshot,
                        engine::LoadVisitor& visitor) {
  rocksdb::ReadOptions read_options;
  read_options.fill_cache = false;
  read_options.snapshot = snapshot;
  rocksdb::Slice upper_bound(end);
  read_options.iterate_upper_bound = &upper_bound;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(read_options));
  for (it->Seek(begin); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key.size() < key_prefix_bytes) {
      return Corruption(fmt::format("counter key '{}'", key.ToString(true)));
    }
    auto record = DecodeCounterValue(it->value(), key);
    if (!record) return tl::unexpected(record.error());
    visitor.Put(std::string_view(key.data() + key_prefix_bytes, key.size() - key_prefix_bytes),
                *record, engine::LoadSource::kTables);
  }
  return FromRocks(it->status(), "load");
}

Status WriteCheckpointBatch(rocksdb::DB& db, const engine::CommitBatch& batch,
                            std::string (*counter_key)(std::string_view)) {
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = true;
  rocksdb::WriteBatch write_batch;
  if (batch.clear_all()) {
    write_batch.DeleteRange(std::string(1, kCounterPrefix), std::string(1, kCounterPrefixEnd));
  }
  for (size_t i = 0; i < batch.delete_count(); ++i) {
    write_batch.Delete(counter_key(batch.delete_key(i)));
  }
  // The puts reach the memtable in key order. The vector memtable is sorted at flush, and a
  // checkpoint's keys come in hash order: sorted runs of a batch make that sort cheaper by
  // more than sorting the batch costs (checkpoint_bench: 1.35-1.46 µs CPU a key written
  // before, 1.19-1.23 after).
  std::vector<std::pair<std::string, uint32_t>> puts;  // stored key, index in the batch
  puts.reserve(batch.put_count());
  for (size_t i = 0; i < batch.put_count(); ++i) {
    puts.emplace_back(counter_key(batch.put_key(i)), static_cast<uint32_t>(i));
  }
  std::sort(puts.begin(), puts.end());  // a key put twice keeps its order (by index)
  char value[16];
  for (const auto& [key, i] : puts) {
    write_batch.Put(key, EncodeCounterValue(batch.put_record(i), value));
  }
  return FromRocks(db.Write(write_options, &write_batch), "checkpoint write");
}

Status WriteCatalog(rocksdb::DB& db, std::span<const engine::Persistence::CatalogOp> ops) {
  rocksdb::WriteBatch batch;
  for (const engine::Persistence::CatalogOp& op : ops) {
    const std::string key = kCatalogPrefix + op.name;
    if (op.value) {
      batch.Put(key, *op.value);
    } else {
      batch.Delete(key);
    }
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  return FromRocks(db.Write(write_options, &batch), "catalog write");
}

Result<std::vector<std::pair<std::string, std::string>>> ReadCatalog(rocksdb::DB& db) {
  std::vector<std::pair<std::string, std::string>> records;
  const std::string lower(1, kCatalogPrefix);
  const std::string upper(1, kCatalogPrefix + 1);
  rocksdb::Slice upper_bound(upper);
  rocksdb::ReadOptions read_options;
  read_options.iterate_upper_bound = &upper_bound;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(read_options));
  for (it->Seek(lower); it->Valid(); it->Next()) {
    records.emplace_back(std::string(it->key().data() + 1, it->key().size() - 1),
                         it->value().ToString());
  }
  if (auto status = FromRocks(it->status(), "catalog read"); !status) {
    return tl::unexpected(status.error());
  }
  return records;
}

}  // namespace tally::storage
