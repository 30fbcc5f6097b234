// The Catalog on its own, over a real store: the records DDL writes (catalog_records.h),
// what Load makes of them (corrupt ones refused, interrupted backfills handed back), and
// which keys it protects.
#include "engine/derived/catalog.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "engine/databases.h"
#include "engine/derived/aggregate_state.h"
#include "engine/derived/derived_test_util.h"

namespace tally::derived {
namespace {

constexpr std::string_view kModel = R"sql(
  CREATE SOURCE orders (id bigint, shop_id bigint);
  CREATE COUNTER shop_orders AS SELECT shop_id, count(*) FROM orders GROUP BY shop_id;
)sql";

class CatalogTest : public CatalogStoreTest {
 protected:
  CatalogTest() : CatalogStoreTest("tally_catalog_test_", 1'700'000'000'000) {}

  std::map<std::string, std::string> Records() {
    auto records = store_->ReadCatalog();
    EXPECT_TRUE(records);
    return {records->begin(), records->end()};
  }

  // Sets a group of `counter` durably, as tally verify's repair does.
  void SetGroup(std::string_view counter, const std::string& key, int64_t value) {
    auto epoch = keyspace_->SetGroups(*catalog_->Snapshot()->FindCounter(counter),
                                      std::vector<KeyValue>{{key, value}});
    ASSERT_TRUE(epoch) << epoch.error().message;
    keyspace_->WaitDurable(*epoch);
  }

  void WriteRecord(const std::string& name, std::optional<std::string> value) {
    const engine::Persistence::CatalogOp op{name, std::move(value)};
    ASSERT_TRUE(store_->WriteCatalog({&op, 1}));
  }
};

TEST_F(CatalogTest, DdlWritesTheRecordsThatLoadReadsBack) {
  ASSERT_TRUE(catalog_->Load());
  Define(kModel, "orders");
  const std::map<std::string, std::string> records = Records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_TRUE(records.at("source/orders").starts_with("CREATE SOURCE orders"));
  EXPECT_TRUE(records.at("counter/shop_orders").starts_with("CREATE COUNTER shop_orders"));
  EXPECT_EQ(records.at("start/shop_orders"), "pending");

  Restart();
  auto interrupted = catalog_->Load();
  ASSERT_TRUE(interrupted) << interrupted.error().message;
  EXPECT_TRUE(interrupted->empty());
  const auto counters = catalog_->Counters();
  ASSERT_EQ(counters.size(), 1u);
  EXPECT_EQ(counters[0].name, "shop_orders");
  EXPECT_EQ(counters[0].source, "orders");
  EXPECT_EQ(counters[0].state, CounterState::kPending);
  EXPECT_EQ(catalog_->Snapshot()->FindCounter("shop_orders")->start, kPendingStart);
  EXPECT_EQ(catalog_->ColumnsRead("orders"), (std::vector<bool>{false, true}));

  // Dropping removes every record of the counter.
  ASSERT_TRUE(catalog_->DropCounter("shop_orders"));
  EXPECT_EQ(Records().size(), 1u);
  EXPECT_EQ(catalog_->DropCounter("shop_orders").error().code, ErrorCode::kNotFound);
}

TEST_F(CatalogTest, LoadHandsBackTheBackfillsACrashInterrupted) {
  ASSERT_TRUE(catalog_->Load());
  Define(kModel);
  WriteRecord("start/shop_orders", "1200");
  WriteRecord("backfill/shop_orders", "");
  WriteRecord("backfill/gone", "");  // a counter that no longer exists: ignored
  Restart();
  auto interrupted = catalog_->Load();
  ASSERT_TRUE(interrupted) << interrupted.error().message;
  ASSERT_EQ(interrupted->size(), 1u);
  EXPECT_EQ((*interrupted)[0]->counter.name(), "shop_orders");
  EXPECT_EQ((*interrupted)[0]->start, 1200);
}

TEST_F(CatalogTest, LoadRefusesRecordsThatDoNotParse) {
  ASSERT_TRUE(catalog_->Load());
  Define(kModel);
  const std::vector<std::pair<std::string, std::string>> corrupt{
      {"start/shop_orders", "soon"},
      {"source/orders", "CREATE COUNTER x AS SELECT count(*) FROM orders"},
      {"counter/shop_orders", "CREATE COUNTER shop_orders AS SELECT count(*) FROM nowhere"},
  };
  for (const auto& [name, value] : corrupt) {
    const std::map<std::string, std::string> before = Records();
    const auto good = before.find(name);
    WriteRecord(name, value);
    Restart();
    auto loaded = catalog_->Load();
    ASSERT_FALSE(loaded) << name;
    EXPECT_EQ(loaded.error().code, ErrorCode::kCorruption) << name;
    EXPECT_NE(loaded.error().message.find(name), std::string::npos) << loaded.error().message;
    // Put it right again for the next case.
    WriteRecord(name, good == before.end() ? std::nullopt : std::optional(good->second));
  }
  Restart();
  EXPECT_TRUE(catalog_->Load());
}

TEST_F(CatalogTest, ACountersKeysAreProtectedUntilItIsDropped) {
  ASSERT_TRUE(catalog_->Load());
  EXPECT_FALSE(catalog_->IsProtectedKey("shop_orders:7"));
  Define(kModel);
  EXPECT_TRUE(catalog_->IsProtectedKey("shop_orders:7"));
  EXPECT_TRUE(catalog_->IsProtectedKey("shop_orders"));  // its name: owned, though no group
  EXPECT_FALSE(catalog_->IsProtectedKey("shop_orders_x:7"));
  EXPECT_TRUE(catalog_->IsProtectedKey(std::string("\0id:x", 5)));
  EXPECT_TRUE(catalog_->IsProtectedKey(std::string("\0pos:orders", 11)));
  // The hidden records of count(DISTINCT), min, max, avg (aggregate_state.h); they cannot
  // collide with the keys of databases 1 and up ("\0db", engine/databases.h).
  const std::string record = std::string(kRecordPrefix) + "13:shop_orders:70n";
  EXPECT_TRUE(catalog_->IsProtectedKey(record));
  EXPECT_FALSE(engine::IsReservedKey(record));
  EXPECT_FALSE(IsInternalKey(engine::StoredKey(1, record)));
  EXPECT_NE(catalog_->ProtectedKeyError(record).find("\\x00agg:"), std::string::npos);
  EXPECT_FALSE(catalog_->IsProtectedKey(std::string("\0other", 6)));
  EXPECT_NE(catalog_->ProtectedKeyError("shop_orders:7").find("derived counter 'shop_orders'"),
            std::string::npos);
  ASSERT_TRUE(catalog_->DropCounter("shop_orders"));
  EXPECT_FALSE(catalog_->IsProtectedKey("shop_orders:7"));
}

// Load rebuilds each family's index from the keyspace: the group of a counter without key
// columns is its name alone, which other counters' keys never are.
TEST_F(CatalogTest, LoadIndexesTheGroupOfACounterWithoutKeyColumns) {
  ASSERT_TRUE(catalog_->Load());
  Define(kModel);
  Define("CREATE COUNTER all_orders AS SELECT count(*) FROM orders;");
  SetGroup("all_orders", "all_orders", 3);
  SetGroup("shop_orders", "shop_orders:1", 2);
  Restart();
  ASSERT_TRUE(catalog_->Load());
  std::map<std::string, size_t> groups;
  for (const CounterListing& counter : catalog_->Counters()) groups[counter.name] = counter.groups;
  EXPECT_EQ(groups, (std::map<std::string, size_t>{{"all_orders", 1}, {"shop_orders", 1}}));
  Family* family = catalog_->Snapshot()->FindCounter("all_orders");
  std::lock_guard lock(family->mutex);
  EXPECT_EQ(std::vector<std::string>(family->keys.begin(), family->keys.end()),
            std::vector<std::string>{"all_orders"});
}

// An interrupted drop of a counter without key columns deletes its group at the next start.
TEST_F(CatalogTest, AnInterruptedDropDeletesTheGroupOfACounterWithoutKeyColumns) {
  ASSERT_TRUE(catalog_->Load());
  Define(kModel);
  Define("CREATE COUNTER all_orders AS SELECT count(*) FROM orders;");
  SetGroup("all_orders", "all_orders", 3);
  WriteRecord("counter/all_orders", std::nullopt);
  WriteRecord("dropping/all_orders", "");
  Restart();
  ASSERT_TRUE(catalog_->Load());
  uint64_t epoch = 0;
  const std::string key = "all_orders";
  EXPECT_EQ(keyspace_->Get({&key, 1}, &epoch)[0], 0);
  EXPECT_FALSE(Records().contains("dropping/all_orders"));
}

}  // namespace
}  // namespace tally::derived
