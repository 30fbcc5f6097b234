// The Applier on its own, over a Catalog and a real store: batches of changes given as
// rows (no JSON, no database), made idempotent by ids or by position records whose name
// the caller chooses (as a node applying a replicated stream's batches would), written
// whole or not at all.
#include "engine/derived/apply.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/derived/derived_test_util.h"

namespace tally::derived {
namespace {

using Value = definitions::Value;

constexpr int64_t kWindowMs = 60'000;

constexpr std::string_view kModel = R"sql(
  CREATE SOURCE orders (id bigint, shop_id bigint, amount bigint);
  CREATE COUNTER shop_orders AS SELECT shop_id, count(*) FROM orders GROUP BY shop_id;
  CREATE COUNTER shop_amount AS SELECT shop_id, sum(amount) FROM orders GROUP BY shop_id;
)sql";

std::vector<Value> Order(int64_t id, int64_t shop, int64_t amount) {
  return {Value::Int(id), Value::Int(shop), Value::Int(amount)};
}

SourceRowChange Insert(std::vector<Value> row) {
  SourceRowChange change;
  change.new_row = std::move(row);
  return change;
}

class ApplierTest : public CatalogStoreTest {
 protected:
  ApplierTest() : CatalogStoreTest("tally_apply_test_", 1'700'000'000'000) {}

  void Open() override {
    CatalogStoreTest::Open();
    if (HasFatalFailure()) return;
    auto loaded = catalog_->Load();
    ASSERT_TRUE(loaded) << loaded.error().message;
    applier_ = std::make_unique<Applier>(engine_->keyspace(), kWindowMs);
  }
  void Close() override {
    applier_.reset();
    CatalogStoreTest::Close();
  }
  void SetUp() override {
    CatalogStoreTest::SetUp();
    if (HasFatalFailure()) return;
    Define(kModel);
  }

  // One position of a stream: `changes` of orders, recorded under `position_name`.
  Result<PushOutcome> ApplyAt(std::string_view position_name, int64_t position,
                              const std::vector<SourceRowChange>& changes) {
    const auto catalog = catalog_->Snapshot();
    const PositionedPart part{catalog->FindSource("orders"), changes, position_name};
    return applier_->ApplyPositioned(*catalog, {&part, 1}, position, {});
  }

  // Orders as decoded changes, the i-th with id ids[i] (empty: none).
  Result<PushOutcome> ApplyWithIds(const std::vector<std::vector<Value>>& rows,
                                   const std::vector<std::string>& ids, std::string_view batch_id) {
    const auto catalog = catalog_->Snapshot();
    std::vector<DecodedChange> changes(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      changes[i].source = &catalog->FindSource("orders")->view;
      changes[i].id = ids[i];
      changes[i].new_row = rows[i];
    }
    return applier_->ApplyChanges(*catalog, changes, batch_id, {});
  }

  int64_t Read(const std::string& key) {
    uint64_t epoch = 0;
    return keyspace_->Get({&key, 1}, &epoch)[0];
  }

  std::unique_ptr<Applier> applier_;
};

TEST_F(ApplierTest, ThePositionIsRecordedUnderTheCallersNameWithTheIncrements) {
  const std::vector<SourceRowChange> first{Insert(Order(1, 7, 30)), Insert(Order(2, 7, 12))};
  auto applied = ApplyAt("stream/partition-3", 50, first);
  ASSERT_TRUE(applied) << applied.error().message;
  EXPECT_EQ(applied->changes, 2u);
  EXPECT_EQ(applied->applied, 2u);
  EXPECT_EQ(applied->increments, 2u);  // shop_orders:7 and shop_amount:7
  EXPECT_EQ(Read("shop_orders:7"), 2);
  EXPECT_EQ(Read("shop_amount:7"), 42);
  EXPECT_EQ(keyspace_->Position("stream/partition-3"), 50);
  EXPECT_EQ(keyspace_->Position("orders"), 0);  // the source's own record is not touched

  // The same position again, or an older one: counted before, skipped whole.
  for (const int64_t position : {50, 40}) {
    auto replay = ApplyAt("stream/partition-3", position, first);
    ASSERT_TRUE(replay) << replay.error().message;
    EXPECT_EQ(replay->applied, 0u);
    EXPECT_EQ(replay->duplicates, 2u);
    EXPECT_EQ(replay->increments, 0u);
  }
  EXPECT_EQ(Read("shop_orders:7"), 2);

  // Another name is another stream: its first batch at 50 counts.
  auto other = ApplyAt("stream/partition-4", 50, {Insert(Order(3, 8, 5))});
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_EQ(other->applied, 1u);

  SourceRowChange remove;
  remove.old_row = Order(1, 7, 30);
  ASSERT_TRUE(ApplyAt("stream/partition-3", 60, {remove}));
  // Engine::Stop commits what was written; a restart finds values and positions together.
  Restart();
  EXPECT_EQ(Read("shop_orders:7"), 1);
  EXPECT_EQ(Read("shop_amount:7"), 12);
  EXPECT_EQ(Read("shop_orders:8"), 1);
  EXPECT_EQ(keyspace_->Position("stream/partition-3"), 60);
  EXPECT_EQ(keyspace_->Position("stream/partition-4"), 50);
}

TEST_F(ApplierTest, AnOverflowWritesNeitherIncrementsNorThePosition) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  ASSERT_TRUE(ApplyAt("orders", 10, {Insert(Order(1, 7, max))}));
  auto refused = ApplyAt("orders", 20, {Insert(Order(2, 9, 1)), Insert(Order(3, 7, 1))});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kOverflow);
  EXPECT_EQ(Read("shop_amount:7"), max);
  EXPECT_EQ(Read("shop_orders:7"), 1);
  EXPECT_EQ(Read("shop_orders:9"), 0);  // the batch's other change is not written either
  EXPECT_EQ(keyspace_->Position("orders"), 10);
}

TEST_F(ApplierTest, ACounterStartingAtOrPastThePositionIsNotMoved) {
  catalog_->Snapshot()->FindCounter("shop_amount")->start = 100;
  ASSERT_TRUE(ApplyAt("orders", 100, {Insert(Order(1, 7, 30))}));
  EXPECT_EQ(Read("shop_orders:7"), 1);
  EXPECT_EQ(Read("shop_amount:7"), 0);  // its backfill's snapshot holds this change
  ASSERT_TRUE(ApplyAt("orders", 101, {Insert(Order(2, 7, 5))}));
  EXPECT_EQ(Read("shop_orders:7"), 2);
  EXPECT_EQ(Read("shop_amount:7"), 5);
}

TEST_F(ApplierTest, IdsAndBatchIdsMakeChangesCountOnce) {
  auto first = ApplyWithIds({Order(1, 7, 30), Order(2, 7, 12)}, {"a", ""}, "");
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->applied, 2u);
  // "a" again, and twice within one batch: counted once.
  auto again = ApplyWithIds({Order(1, 7, 30), Order(3, 7, 1), Order(3, 7, 1)}, {"a", "b", "b"}, "");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->applied, 1u);
  EXPECT_EQ(again->duplicates, 2u);
  EXPECT_EQ(Read("shop_orders:7"), 3);
  EXPECT_EQ(Read("shop_amount:7"), 43);

  auto batch = ApplyWithIds({Order(4, 8, 1), Order(5, 8, 1)}, {"", ""}, "batch-1");
  ASSERT_TRUE(batch) << batch.error().message;
  EXPECT_EQ(batch->applied, 2u);
  auto resent = ApplyWithIds({Order(4, 8, 1), Order(5, 8, 1)}, {"", ""}, "batch-1");
  ASSERT_TRUE(resent) << resent.error().message;
  EXPECT_EQ(resent->applied, 0u);
  EXPECT_EQ(resent->duplicates, 2u);
  EXPECT_EQ(Read("shop_orders:8"), 2);

  // The markers live for the idempotency window, by the keyspace's clock.
  for (const std::string_view id : {"a", "b", "batch-1"}) {
    const std::string marker = MarkerKey(id);
    const engine::HashedKey hashed(marker);
    engine::View view = engine_->keyspace().Lock(hashed);
    EXPECT_EQ(view.TimeToLiveMillis(hashed), kWindowMs) << id;
  }
}

}  // namespace
}  // namespace tally::derived
