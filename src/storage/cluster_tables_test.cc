#include "storage/cluster_tables.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/slot.h"
#include "core/test_dir.h"
#include "storage/rocksdb_store.h"

namespace tally::storage {
namespace {

// Collects the counters a store loads.
class Collected final : public engine::LoadVisitor {
 public:
  void Put(std::string_view key, const engine::CounterRecord& record, engine::LoadSource) override {
    values[std::string(key)] = record.value;
  }
  void Delete(std::string_view key, engine::LoadSource) override { values.erase(std::string(key)); }
  void ClearAll(engine::LoadSource) override { values.clear(); }
  std::map<std::string, int64_t> values;
};

constexpr uint32_t kPartitions = 4;

// The first key "k<i>" whose slot is `slot` (CRC16 spreads them: every slot has one below
// i = 10^6).
std::string KeyInSlot(uint32_t slot) {
  for (int i = 0; i < 1000000; ++i) {
    std::string key = "k" + std::to_string(i);
    if (KeySlot(key) == slot) return key;
  }
  ADD_FAILURE() << "no key for slot " << slot;
  return "";
}

class ClusterTablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDirectory("tally_cluster_tables_test_");
    if (!testing::InDeathTestChild()) std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    if (!testing::InDeathTestChild()) std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<ClusterTables> Open(uint32_t partitions = kPartitions) {
    auto tables = ClusterTables::Open({.path = dir_.string(), .partition_count = partitions});
    EXPECT_TRUE(tables.has_value()) << tables.error().message;
    return tables ? std::move(*tables) : nullptr;
  }

  static std::map<std::string, int64_t> Load(ClusterTables& tables) {
    Collected loaded;
    EXPECT_TRUE(tables.LoadCounters(loaded).has_value());
    return loaded.values;
  }

  // Writes `values` as one checkpoint of the partitions in `owned`, ending at `positions`.
  static void Checkpoint(ClusterTables& tables, const std::map<std::string, int64_t>& values,
                         std::vector<uint32_t> owned, std::vector<StreamPosition> positions) {
    ASSERT_TRUE(tables.BeginCheckpoint(owned).has_value());
    engine::CommitBatch batch;
    for (const auto& [key, value] : values) batch.AddPut(key, {value, 0});
    ASSERT_TRUE(tables.CheckpointWrite(batch).has_value());
    ASSERT_TRUE(tables.FinishCheckpoint(positions).has_value());
  }

  std::filesystem::path dir_;
};

TEST_F(ClusterTablesTest, ASingleNodeStoreIsNotOpenedAsAClusterStoreNorTheOtherWay) {
  ASSERT_TRUE(RocksDbStore::Open({.path = (dir_ / "single").string()}).has_value());
  auto as_cluster =
      ClusterTables::Open({.path = (dir_ / "single").string(), .partition_count = kPartitions});
  ASSERT_FALSE(as_cluster.has_value());
  EXPECT_EQ(as_cluster.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(as_cluster.error().message.find("single-node mode"), std::string::npos)
      << as_cluster.error().message;

  ASSERT_TRUE(
      ClusterTables::Open({.path = (dir_ / "cluster").string(), .partition_count = kPartitions})
          .has_value());
  auto as_single = RocksDbStore::Open({.path = (dir_ / "cluster").string()});
  ASSERT_FALSE(as_single.has_value());
  EXPECT_EQ(as_single.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(as_single.error().message.find("cluster mode"), std::string::npos)
      << as_single.error().message;
  // Each still opens in its own mode.
  EXPECT_TRUE(RocksDbStore::Open({.path = (dir_ / "single").string()}).has_value());
  EXPECT_TRUE(
      ClusterTables::Open({.path = (dir_ / "cluster").string(), .partition_count = kPartitions})
          .has_value());
}

TEST_F(ClusterTablesTest, AnotherPartitionCountIsRefused) {
  Open(kPartitions).reset();
  auto other = ClusterTables::Open({.path = dir_.string(), .partition_count = kPartitions * 2});
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(ClusterTablesTest, CountersAndPositionsSurviveAReopen) {
  const std::map<std::string, int64_t> values = {{"a", 1}, {"b", -2}, {"user:{42}:x", 3}};
  const std::vector<StreamPosition> positions = {{7, 1, 11}, {0, 0, 0}, {9, 3, 12}, {2, 1, 13}};
  {
    auto tables = Open();
    ASSERT_TRUE(tables);
    EXPECT_EQ(tables->ReadPositions().value(), std::vector<StreamPosition>(kPartitions));
    Checkpoint(*tables, values, {0, 2}, positions);
  }
  auto tables = Open();
  ASSERT_TRUE(tables);
  EXPECT_EQ(Load(*tables), values);
  EXPECT_EQ(tables->ReadPositions().value(), positions);
  EXPECT_EQ(tables->ReadOpenCheckpoint().value(), std::nullopt);
}

TEST_F(ClusterTablesTest, ACheckpointCutShortByACrashLeavesItsPartitionsAndTheOldPositions) {
  const std::vector<StreamPosition> first = {{1, 1, 5}, {2, 1, 6}, {3, 1, 7}, {4, 1, 8}};
  {
    auto tables = Open();
    ASSERT_TRUE(tables);
    Checkpoint(*tables, {{"a", 1}}, {1, 3}, first);
  }
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(
      {
        auto tables = Open();
        if (!tables->BeginCheckpoint(std::vector<uint32_t>{1, 3})) ::_exit(1);
        engine::CommitBatch batch;
        batch.AddPut("a", {2, 0});
        if (!tables->CheckpointWrite(batch)) ::_exit(1);
        ::_exit(0);  // no FinishCheckpoint, no destructor
      },
      ::testing::ExitedWithCode(0), "");
  auto tables = Open();
  ASSERT_TRUE(tables);
  EXPECT_EQ(tables->ReadOpenCheckpoint().value(), (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(tables->ReadPositions().value(), first);
  ASSERT_TRUE(tables->CloseOpenCheckpoint().has_value());
  EXPECT_EQ(tables->ReadOpenCheckpoint().value(), std::nullopt);
}

TEST_F(ClusterTablesTest, RebuildDeletesExactlyThePartitionsKeysAndPosition) {
  // Keys on both edges of every partition, and a key in its middle.
  std::map<std::string, int64_t> values;
  std::map<std::string, uint32_t> partition_of;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const SlotRange slots = PartitionSlots(p, kPartitions);
    for (uint32_t slot : {slots.first, (slots.first + slots.last) / 2, slots.last}) {
      const std::string key = KeyInSlot(slot);
      values[key] = static_cast<int64_t>(slot);
      partition_of[key] = p;
    }
  }
  const std::vector<StreamPosition> positions = {{1, 1, 5}, {2, 1, 6}, {3, 1, 7}, {4, 1, 8}};
  auto tables = Open();
  ASSERT_TRUE(tables);
  Checkpoint(*tables, values, {0, 1, 2, 3}, positions);

  ASSERT_TRUE(tables->RebuildPartition(1).has_value());
  std::map<std::string, int64_t> expected;
  for (const auto& [key, value] : values) {
    if (partition_of[key] != 1) expected[key] = value;
  }
  ASSERT_EQ(expected.size(), values.size() - 3);
  EXPECT_EQ(Load(*tables), expected);
  std::vector<StreamPosition> expected_positions = positions;
  expected_positions[1] = {};
  EXPECT_EQ(tables->ReadPositions().value(), expected_positions);
  EXPECT_FALSE(tables->RebuildPartition(kPartitions).has_value());

  // The last partition's range ends at the last slot.
  ASSERT_TRUE(tables->RebuildPartition(kPartitions - 1).has_value());
  for (const auto& [key, p] : partition_of) {
    if (p == kPartitions - 1) expected.erase(key);
  }
  EXPECT_EQ(Load(*tables), expected);
}

TEST_F(ClusterTablesTest, TheNodeIdIsDrawnOnceAndKept) {
  std::string id;
  {
    auto tables = Open();
    ASSERT_TRUE(tables);
    id = tables->node_id();
  }
  ASSERT_EQ(id.size(), 40u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  auto again = Open();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->node_id(), id);
  auto other = ClusterTables::Open({.path = (dir_ / "other").string(), .partition_count = 1});
  ASSERT_TRUE(other.has_value());
  EXPECT_NE((*other)->node_id(), id);
}

TEST_F(ClusterTablesTest, TheCatalogIsKeptBesideTheCounters) {
  auto tables = Open();
  ASSERT_TRUE(tables);
  const std::vector<engine::Persistence::CatalogOp> ops = {{"def:a", "text a"},
                                                           {"def:b", "text b"}};
  ASSERT_TRUE(tables->WriteCatalog(ops).has_value());
  const std::vector<engine::Persistence::CatalogOp> remove = {{"def:a", std::nullopt}};
  ASSERT_TRUE(tables->WriteCatalog(remove).has_value());
  using Records = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(tables->ReadCatalog().value(), (Records{{"def:b", "text b"}}));
  EXPECT_TRUE(Load(*tables).empty());
}

}  // namespace
}  // namespace tally::storage
