// DerivedCounters over a real RocksDbStore in a temporary directory: definitions, the push
// path (atomic, idempotent, refusing bad changes whole), reads, drops and restarts.
#include "engine/derived/derived_counters.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "engine/derived/derived_test_util.h"

namespace tally::derived {
namespace {

constexpr std::string_view kBlogModel = R"sql(
  CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, rating integer,
                       is_published boolean, is_deleted boolean, created_at timestamptz);
  CREATE COUNTER blog_posts AS
    SELECT blog_id, user_id, count(*) FROM posts
    WHERE is_published AND NOT is_deleted GROUP BY blog_id, user_id;
  CREATE COUNTER blog_rating AS
    SELECT blog_id, sum(rating) FROM posts WHERE is_published GROUP BY blog_id;
)sql";

// A post as JSON, for changes.
std::string Post(int id, int user, int blog, int rating, bool published, bool deleted = false) {
  return "{\"id\":" + std::to_string(id) + ",\"user_id\":" + std::to_string(user) +
         ",\"blog_id\":" + std::to_string(blog) + ",\"rating\":" + std::to_string(rating) +
         ",\"is_published\":" + (published ? "true" : "false") +
         ",\"is_deleted\":" + (deleted ? "true" : "false") +
         ",\"created_at\":\"2024-05-01T10:00:00Z\"}";
}

std::string Insert(const std::string& row, std::string_view id = "") {
  std::string change = R"({"source":"posts","new":)" + row;
  if (!id.empty()) change += ",\"id\":\"" + std::string(id) + "\"";
  return change + "}";
}

std::string Update(const std::string& old_row, const std::string& new_row) {
  return R"({"source":"posts","old":)" + old_row + ",\"new\":" + new_row + "}";
}

std::string Delete(const std::string& row) { return R"({"source":"posts","old":)" + row + "}"; }

class DerivedCountersTest : public DerivedStoreTest {
 protected:
  DerivedCountersTest() : DerivedStoreTest("tally_derived_test_", 1'700'000'000'000, {}) {}

  Result<PushOutcome> Push(const std::string& body, std::string_view id = "") {
    auto outcome = derived_->Push(body, id, decoder_);
    if (outcome) engine_->committer().WaitDurable(outcome->required_epoch);
    return outcome;
  }

  // The state Counters() lists for `name`.
  CounterState State(std::string_view name) {
    for (const CounterListing& counter : derived_->Counters()) {
      if (counter.name == name) return counter.state;
    }
    ADD_FAILURE() << "no counter " << name;
    return CounterState::kCounting;
  }

  // Every live group of every counter, through the family listings.
  std::map<std::string, int64_t> All() {
    std::map<std::string, int64_t> all;
    for (const CounterListing& counter : derived_->Counters()) {
      auto prefix = derived_->PrefixOf(counter.name, {});
      EXPECT_TRUE(prefix);
      std::string cursor;
      do {
        auto page = derived_->List(counter.name, *prefix, cursor, 3);
        EXPECT_TRUE(page) << page.error().message;
        for (const KeyValue& item : page->items) all[item.key] = item.value;
        cursor = page->next_cursor;
      } while (!cursor.empty());
    }
    return all;
  }
};

TEST_F(DerivedCountersTest, TheFormulaKeepsCountsAndSums) {
  Define(kBlogModel);
  ASSERT_TRUE(Push("[" + Insert(Post(1, 10, 7, 4, true)) + "," + Insert(Post(2, 10, 7, 5, true)) +
                   "," + Insert(Post(3, 11, 7, 3, false)) + "]"));
  EXPECT_EQ(Value("blog_posts:7:10"), 2);
  EXPECT_EQ(Value("blog_rating:7"), 9);
  EXPECT_EQ(Value("blog_posts:7:11"), 0);

  // Publish post 3, move post 1 to blog 8, then delete post 2.
  auto moved = Push("[" + Update(Post(3, 11, 7, 3, false), Post(3, 11, 7, 3, true)) + "," +
                    Update(Post(1, 10, 7, 4, true), Post(1, 10, 8, 4, true)) + "]");
  ASSERT_TRUE(moved) << moved.error().message;
  EXPECT_EQ(moved->applied, 2u);
  ASSERT_TRUE(Push(Delete(Post(2, 10, 7, 5, true))));
  const std::map<std::string, int64_t> expected{
      {"blog_posts:7:11", 1}, {"blog_posts:8:10", 1}, {"blog_rating:7", 3}, {"blog_rating:8", 4}};
  EXPECT_EQ(All(), expected);  // blog_posts:7:10 went back to 0 and is gone
  EXPECT_FALSE(engine_->keyspace()
                   .Lock(engine::HashedKey("blog_posts:7:10"))
                   .Exists(engine::HashedKey("blog_posts:7:10")));
}

TEST_F(DerivedCountersTest, ABadChangeRefusesTheWholeBatch) {
  Define(kBlogModel);
  ASSERT_TRUE(Push(Insert(Post(1, 10, 7, 4, true))));
  const auto before = All();
  auto refused = Push("[" + Insert(Post(2, 10, 7, 4, true)) +
                      R"(,{"source":"posts","new":{"id":3,"user_id":1,"blog_id":"seven"}}])");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("change 2"), std::string::npos) << refused.error().message;
  EXPECT_EQ(All(), before);
  EXPECT_EQ(derived_->pushes_refused(), 1u);
}

TEST_F(DerivedCountersTest, AnOverflowRefusesTheBatchAndChangesNothing) {
  Define(R"sql(CREATE SOURCE t (k bigint, v bigint);
               CREATE COUNTER total AS SELECT k, sum(v) FROM t GROUP BY k;)sql");
  ASSERT_TRUE(Push(R"({"source":"t","new":{"k":1,"v":9223372036854775000}})"));
  auto refused = Push(R"([{"source":"t","new":{"k":2,"v":5}},
                          {"source":"t","new":{"k":1,"v":1000}}])");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kOverflow);
  EXPECT_NE(refused.error().message.find("total:1"), std::string::npos) << refused.error().message;
  EXPECT_EQ(Value("total:1"), 9223372036854775000);
  EXPECT_EQ(Value("total:2"), 0);
}

TEST_F(DerivedCountersTest, IdsMakePushesIdempotentAcrossRestarts) {
  Define(kBlogModel);
  const std::string batch = "[" + Insert(Post(1, 10, 7, 4, true)) + "," +
                            Insert(Post(2, 11, 7, 1, true), "change-2") + "]";
  auto first = Push(batch, "batch-1");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->applied, 2u);
  auto resent = Push(batch, "batch-1");
  ASSERT_TRUE(resent);
  EXPECT_EQ(resent->applied, 0u);
  EXPECT_EQ(resent->duplicates, 2u);

  Restart();
  auto after_restart = Push(batch, "batch-1");
  ASSERT_TRUE(after_restart);
  EXPECT_EQ(after_restart->duplicates, 2u);
  // The change with its own id is skipped in another batch; the other change counts.
  auto partly = Push(batch, "batch-2");
  ASSERT_TRUE(partly);
  EXPECT_EQ(partly->applied, 1u);
  EXPECT_EQ(partly->duplicates, 1u);
  EXPECT_EQ(Value("blog_posts:7:10"), 2);
  EXPECT_EQ(Value("blog_posts:7:11"), 1);
  EXPECT_EQ(Value("blog_rating:7"), 9);

  // A repeated id inside one push counts once.
  auto twice = Push("[" + Insert(Post(3, 12, 7, 1, true), "c3") + "," +
                    Insert(Post(3, 12, 7, 1, true), "c3") + "]");
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->applied, 1u);
  EXPECT_EQ(Value("blog_posts:7:12"), 1);

  // Past the window, the id is forgotten.
  clock_.Advance(DerivedOptions{}.idempotency_window_ms + 1);
  auto late = Push(batch, "batch-1");
  ASSERT_TRUE(late);
  EXPECT_EQ(late->applied, 2u);
}

TEST_F(DerivedCountersTest, DefinitionsAndGroupsSurviveARestart) {
  Define(kBlogModel);
  ASSERT_TRUE(Push(Insert(Post(1, 10, 7, 4, true))));
  const auto before = All();
  Restart();
  EXPECT_EQ(derived_->Counters().size(), 2u);
  EXPECT_EQ(All(), before);
  // Applying the same script again is a no-op; a different definition under an existing
  // name is refused.
  Define(kBlogModel);
  auto changed = derived_->Execute(
      "CREATE COUNTER blog_rating AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id");
  ASSERT_FALSE(changed);
  EXPECT_NE(changed.error().message.find("already exists"), std::string::npos);
}

TEST_F(DerivedCountersTest, DropRemovesEveryGroupAndFreesTheName) {
  Define(kBlogModel);
  std::string batch = "[";
  for (int i = 0; i < 3000; ++i) {
    batch += (i ? "," : "") + Insert(Post(i, i % 50, i % 7, 1, true));
  }
  ASSERT_TRUE(Push(batch + "]"));
  EXPECT_EQ(derived_->Counters()[0].groups, 350u);
  auto dropped = derived_->Drop("blog_posts");
  ASSERT_TRUE(dropped) << dropped.error().message;
  EXPECT_FALSE(derived_->IsProtectedKey("blog_posts:1:1"));
  Restart();
  EXPECT_EQ(derived_->Counters().size(), 1u);
  EXPECT_EQ(Value("blog_posts:1:1"), 0);
  EXPECT_EQ(engine_->keyspace().size(), 7u);  // blog_rating's groups only
  EXPECT_FALSE(derived_->Drop("blog_posts"));
}

TEST_F(DerivedCountersTest, AnInterruptedDropFinishesAtStart) {
  Define(kBlogModel);
  ASSERT_TRUE(Push(Insert(Post(1, 10, 7, 4, true))));
  // What a crash right after DROP COUNTER began leaves behind.
  const std::array<engine::Persistence::CatalogOp, 2> ops{{
      {"counter/blog_posts", std::nullopt},
      {"dropping/blog_posts", std::string()},
  }};
  ASSERT_TRUE(store_->WriteCatalog(ops));
  Restart();
  EXPECT_EQ(Value("blog_posts:7:10"), 0);
  EXPECT_EQ(Value("blog_rating:7"), 4);
  auto records = store_->ReadCatalog();
  ASSERT_TRUE(records);
  for (const auto& [name, value] : *records) EXPECT_FALSE(name.starts_with("dropping/")) << name;
}

TEST_F(DerivedCountersTest, ABackfillMovesOneCounterOnly) {
  Define(kBlogModel);
  const std::string rows =
      "[" + Insert(Post(1, 10, 7, 4, true)) + "," + Insert(Post(2, 11, 7, 2, true)) + "]";
  ASSERT_TRUE(Push(rows));
  Define("CREATE COUNTER blog_count AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id");
  EXPECT_EQ(Value("blog_count:7"), 0);  // a new counter starts empty
  auto backfilled = derived_->Push(rows, "backfill-1", decoder_, "blog_count");
  ASSERT_TRUE(backfilled) << backfilled.error().message;
  EXPECT_EQ(Value("blog_count:7"), 2);
  EXPECT_EQ(Value("blog_posts:7:10"), 1);  // not counted twice
  EXPECT_EQ(Value("blog_rating:7"), 6);
  EXPECT_EQ(derived_->Push(rows, "", decoder_, "nope").error().code, ErrorCode::kNotFound);
}

// A row of the blog model's source in schema order.
std::vector<definitions::Value> PostRow(int id, int user, int blog, int rating, bool published) {
  using definitions::Value;
  return {Value::Int(id),
          Value::Int(user),
          Value::Int(blog),
          Value::Int(rating),
          Value::Bool(published),
          Value::Bool(false),
          Value::Timestamp(1'714'557'600'000'000)};
}

TEST_F(DerivedCountersTest, SourceTransactionsCarryTheirPositionAndApplyOnce) {
  Define(kBlogModel);
  EXPECT_EQ(derived_->SourcePosition("posts"), 0);
  std::vector<SourceRowChange> txn(2);
  txn[0].new_row = PostRow(1, 10, 7, 4, true);
  txn[1].new_row = PostRow(2, 10, 7, 1, true);
  auto first = derived_->ApplyTransaction("posts", txn, 1000);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->applied, 2u);
  engine_->committer().WaitDurable(first->required_epoch);
  // The same transaction again (a stream resumed from an older position) is skipped.
  auto again = derived_->ApplyTransaction("posts", txn, 1000);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->applied, 0u);
  EXPECT_EQ(Value("blog_posts:7:10"), 2);

  Restart();
  EXPECT_EQ(derived_->SourcePosition("posts"), 1000);
  std::vector<SourceRowChange> update(1);
  update[0].old_row = PostRow(1, 10, 7, 4, true);
  update[0].new_row = PostRow(1, 10, 8, 4, true);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", update, 2000));
  EXPECT_EQ(Value("blog_posts:7:10"), 1);
  EXPECT_EQ(Value("blog_posts:8:10"), 1);
  EXPECT_EQ(derived_->SourcePosition("posts"), 2000);
  EXPECT_FALSE(derived_->ApplyTransaction("nope", update, 3000));
}

TEST_F(DerivedCountersTest, ATruncateZeroesTheSourcesCountersInOrder) {
  Define(kBlogModel);
  std::vector<SourceRowChange> txn(4);
  txn[0].new_row = PostRow(1, 10, 7, 4, true);
  txn[1].truncate = true;
  txn[2].new_row = PostRow(2, 11, 7, 2, true);
  txn[3].new_row = PostRow(3, 11, 9, 5, true);
  auto applied = derived_->ApplyTransaction("posts", txn, 500);
  ASSERT_TRUE(applied) << applied.error().message;
  const std::map<std::string, int64_t> expected{
      {"blog_posts:7:11", 1}, {"blog_posts:9:11", 1}, {"blog_rating:7", 2}, {"blog_rating:9", 5}};
  EXPECT_EQ(All(), expected);
  std::vector<SourceRowChange> truncate(1);
  truncate[0].truncate = true;
  ASSERT_TRUE(derived_->ApplyTransaction("posts", truncate, 600));
  EXPECT_TRUE(All().empty());
  EXPECT_EQ(derived_->SourcePosition("posts"), 600);
  Restart();
  EXPECT_TRUE(All().empty());
}

TEST_F(DerivedCountersTest, ATransactionOverTwoSourcesIsOneStep) {
  Define(kBlogModel);
  Define(R"sql(CREATE SOURCE likes (post_id bigint, user_id bigint);
               CREATE COUNTER post_likes AS SELECT post_id, count(*) FROM likes GROUP BY post_id;)sql");
  std::vector<SourceRowChange> posts(1);
  posts[0].new_row = PostRow(1, 10, 7, 4, true);
  std::vector<SourceRowChange> likes(1);
  likes[0].new_row =
      std::vector<definitions::Value>{definitions::Value::Int(1), definitions::Value::Int(5)};
  const std::vector<SourceTransactionPart> parts{{"posts", posts}, {"likes", likes}};
  auto applied = derived_->ApplyTransaction(parts, 700);
  ASSERT_TRUE(applied) << applied.error().message;
  EXPECT_EQ(applied->applied, 2u);
  EXPECT_EQ(Value("blog_posts:7:10"), 1);
  EXPECT_EQ(Value("post_likes:1"), 1);
  EXPECT_EQ(derived_->SourcePosition("likes"), 700);
  // Replayed after a restart that kept only the older position of one source: that part is
  // skipped, the other applied.
  std::vector<SourceRowChange> older(1);
  older[0].new_row = PostRow(2, 10, 7, 4, true);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", older, 800));
  auto replay = derived_->ApplyTransaction(parts, 800);
  ASSERT_TRUE(replay);
  EXPECT_EQ(replay->applied, 1u);
  EXPECT_EQ(Value("post_likes:1"), 2);
  EXPECT_EQ(Value("blog_posts:7:10"), 2);
}

TEST_F(DerivedCountersTest, AHoldStopsTheStreamAtItsPosition) {
  Define(kBlogModel);
  ASSERT_TRUE(derived_->Hold(1000));
  EXPECT_FALSE(derived_->Hold(2000));
  std::vector<SourceRowChange> txn(1);
  txn[0].new_row = PostRow(1, 10, 7, 4, true);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", txn, 900));  // below the hold: applies
  EXPECT_FALSE(derived_->hold_state().reached);
  std::thread stream([&] { ASSERT_TRUE(derived_->ApplyTransaction("posts", txn, 1100)); });
  for (int i = 0; i < 5000 && !derived_->hold_state().reached; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(derived_->hold_state().reached);
  EXPECT_EQ(Value("blog_posts:7:10"), 1);  // the transaction above the hold waits
  // Repair while held: the value is set exactly, in one step.
  const std::vector<KeyValue> fixes{{"blog_posts:7:10", 5}, {"blog_posts:9:9", 0}};
  auto repaired = derived_->Repair("blog_posts", fixes);
  ASSERT_TRUE(repaired) << repaired.error().message;
  EXPECT_EQ(Value("blog_posts:7:10"), 5);
  EXPECT_FALSE(derived_->Repair("blog_posts", std::vector<KeyValue>{{"other:1", 1}}));
  derived_->Release();
  stream.join();
  EXPECT_EQ(Value("blog_posts:7:10"), 6);
  EXPECT_EQ(derived_->SourcePosition("posts"), 1100);
  ASSERT_TRUE(derived_->Hold(1200));
  derived_->MarkStreamAt(1200);  // the stream delivered everything up to it
  EXPECT_TRUE(derived_->hold_state().reached);
  derived_->Release();
}

TEST_F(DerivedCountersTest, ASourceResetForgetsGroupsAndPosition) {
  Define(kBlogModel);
  std::vector<SourceRowChange> txn(1);
  txn[0].new_row = PostRow(1, 10, 7, 4, true);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", txn, 0));  // a backfill chunk
  EXPECT_EQ(derived_->SourcePosition("posts"), 0);
  EXPECT_EQ(Value("blog_posts:7:10"), 1);
  ASSERT_TRUE(derived_->ResetSource("posts"));
  EXPECT_TRUE(All().empty());
  EXPECT_TRUE(derived_->IsProtectedKey(std::string("\0pos:posts", 10)));
}

TEST_F(DerivedCountersTest, ACounterAddedMidStreamWaitsForItsBackfillThenCountsAfterIt) {
  Define(kBlogModel);
  std::vector<SourceRowChange> one(1);
  one[0].new_row = PostRow(1, 10, 7, 4, true);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", one, 1000));
  derived_->MarkStreamed("posts");
  // Counters that existed before: start 0, as today.
  EXPECT_EQ(*derived_->CounterStart("blog_posts"), 0);
  EXPECT_TRUE(derived_->PendingCounters("posts").empty());
  Define("CREATE COUNTER blog_count AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id");
  EXPECT_EQ(*derived_->CounterStart("blog_count"), INT64_MAX);
  EXPECT_EQ(derived_->PendingCounters("posts"), std::vector<std::string>{"blog_count"});
  EXPECT_EQ(State("blog_count"), CounterState::kPending);
  EXPECT_EQ(State("blog_posts"), CounterState::kCounting);

  // Pending: neither the stream nor a plain backfill chunk moves it; the others count.
  std::vector<SourceRowChange> two(1);
  two[0].new_row = PostRow(2, 11, 7, 2, true);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", two, 1100));
  ASSERT_TRUE(derived_->ApplyTransaction("posts", two, 0));
  EXPECT_EQ(Value("blog_count:7"), 0);
  EXPECT_EQ(Value("blog_posts:7:11"), 2);

  // The stream is already past 1050: the snapshot there would miss the transaction at 1100.
  auto late = derived_->ActivateCounter("blog_count", 1050);
  ASSERT_TRUE(late);
  EXPECT_FALSE(*late);
  EXPECT_EQ(*derived_->CounterStart("blog_count"), INT64_MAX);

  // Activated at 1200: transactions up to 1200 skip it, later ones count.
  auto activated = derived_->ActivateCounter("blog_count", 1200);
  ASSERT_TRUE(activated) << activated.error().message;
  EXPECT_TRUE(*activated);
  EXPECT_TRUE(derived_->PendingCounters("posts").empty());
  EXPECT_EQ(State("blog_count"), CounterState::kBackfilling);  // partial until FinishBackfill
  std::vector<SourceRowChange> three(1);
  three[0].new_row = PostRow(3, 12, 7, 1, true);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", three, 1150));  // in the snapshot
  EXPECT_EQ(Value("blog_count:7"), 0);
  EXPECT_EQ(Value("blog_posts:7:12"), 1);
  std::vector<SourceRowChange> four(1);
  four[0].new_row = PostRow(4, 12, 8, 1, true);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", four, 1300));  // after it
  EXPECT_EQ(Value("blog_count:8"), 1);
  // The snapshot's rows (posts 1-3), to this counter alone.
  std::vector<SourceRowChange> rows(3);
  rows[0].new_row = PostRow(1, 10, 7, 4, true);
  rows[1].new_row = PostRow(2, 11, 7, 2, true);
  rows[2].new_row = PostRow(3, 12, 7, 1, true);
  auto filled = derived_->ApplyBackfill("blog_count", rows);
  ASSERT_TRUE(filled) << filled.error().message;
  ASSERT_TRUE(derived_->FinishBackfill("blog_count"));
  EXPECT_EQ(State("blog_count"), CounterState::kCounting);
  EXPECT_EQ(Value("blog_count:7"), 3);
  EXPECT_EQ(Value("blog_count:8"), 1);
  EXPECT_EQ(Value("blog_posts:7:10"), 1);  // nobody else counted twice
  EXPECT_EQ(Value("blog_posts:7:12"), 1);

  // The start survives a restart (streaming is marked again by the runner).
  Restart();
  EXPECT_EQ(*derived_->CounterStart("blog_count"), 1200);
  EXPECT_EQ(State("blog_count"), CounterState::kCounting);
  EXPECT_EQ(Value("blog_count:7"), 3);
  ASSERT_TRUE(derived_->ApplyTransaction("posts", three, 1150));  // replayed: skipped by all
  EXPECT_EQ(Value("blog_count:7"), 3);
}

TEST_F(DerivedCountersTest, ABackfillACrashInterruptedIsDoneAgain) {
  Define(kBlogModel);
  derived_->MarkStreamed("posts");
  Define("CREATE COUNTER blog_count AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id");
  // Pending survives a restart.
  Restart();
  EXPECT_EQ(*derived_->CounterStart("blog_count"), INT64_MAX);
  derived_->MarkStreamed("posts");
  ASSERT_TRUE(*derived_->ActivateCounter("blog_count", 500));
  std::vector<SourceRowChange> rows(1);
  rows[0].new_row = PostRow(1, 10, 7, 4, true);
  ASSERT_TRUE(derived_->ApplyBackfill("blog_count", rows));
  EXPECT_EQ(Value("blog_count:7"), 1);
  EXPECT_EQ(State("blog_count"), CounterState::kBackfilling);
  // No FinishBackfill: the marker says the groups are partial.
  Restart();
  EXPECT_EQ(*derived_->CounterStart("blog_count"), INT64_MAX);
  EXPECT_EQ(State("blog_count"), CounterState::kPending);
  EXPECT_EQ(Value("blog_count:7"), 0);
  EXPECT_EQ(derived_->PendingCounters("posts"), std::vector<std::string>{"blog_count"});
  derived_->MarkStreamed("posts");
  ASSERT_TRUE(*derived_->ActivateCounter("blog_count", 600));
  ASSERT_TRUE(derived_->ApplyBackfill("blog_count", rows));
  ASSERT_TRUE(derived_->FinishBackfill("blog_count"));
  Restart();
  EXPECT_EQ(*derived_->CounterStart("blog_count"), 600);
  EXPECT_EQ(Value("blog_count:7"), 1);

  // ResetCounter: groups gone, pending again on a streamed source.
  derived_->MarkStreamed("posts");
  ASSERT_TRUE(derived_->ResetCounter("blog_count"));
  EXPECT_EQ(Value("blog_count:7"), 0);
  EXPECT_EQ(*derived_->CounterStart("blog_count"), INT64_MAX);
  EXPECT_EQ(State("blog_count"), CounterState::kPending);
  ASSERT_TRUE(*derived_->ActivateCounter("blog_count", 700));
  ASSERT_TRUE(derived_->ResetCounter("blog_count"));  // a backfill given up: pending again
  EXPECT_EQ(State("blog_count"), CounterState::kPending);
  // A whole-source reset (the runner's first backfill) counts every counter again: start 0.
  ASSERT_TRUE(*derived_->ActivateCounter("blog_count", 800));
  ASSERT_TRUE(derived_->ResetSource("posts"));
  EXPECT_EQ(*derived_->CounterStart("blog_count"), 0);
  EXPECT_EQ(State("blog_count"), CounterState::kCounting);
  Restart();
  EXPECT_EQ(*derived_->CounterStart("blog_count"), 0);
  // Dropped and created again on a source not streamed (after the restart): start 0.
  ASSERT_TRUE(derived_->Drop("blog_count"));
  Define("CREATE COUNTER blog_count AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id");
  EXPECT_EQ(*derived_->CounterStart("blog_count"), 0);
}

TEST_F(DerivedCountersTest, PlainCountersMayNotBeTakenOver) {
  {
    const engine::HashedKey key("blog_posts:1:1");
    engine::View view = engine_->keyspace().Lock(key);
    ASSERT_TRUE(view.IncrBy(key, 1));
  }
  auto refused = derived_->Execute(kBlogModel);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("plain counters named blog_posts or blog_posts:... exist"),
            std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(derived_->IsProtectedKey(std::string("\0id:x", 5)));
  EXPECT_FALSE(derived_->IsProtectedKey(std::string("\0", 1)));  // a binary key
  EXPECT_FALSE(derived_->IsProtectedKey("blog_posts:1:1"));      // the counter was not created
  EXPECT_FALSE(derived_->IsProtectedKey("blog_rating:1"));       // the script stopped before
}

TEST_F(DerivedCountersTest, ReadsByPartsPrefixesAndTopK) {
  Define(kBlogModel);
  std::string batch = "[";
  for (int i = 0; i < 40; ++i) {
    // Blog 7: user u has u+1 posts for u < 5; blog 8 gets the rest.
    const int user = i < 15 ? (i < 1 ? 0 : i < 3 ? 1 : i < 6 ? 2 : i < 10 ? 3 : 4) : 100 + i;
    batch += (i ? "," : "") + Insert(Post(i, user, i < 15 ? 7 : 8, 1, true));
  }
  ASSERT_TRUE(Push(batch + "]"));
  const std::string_view parts[] = {"7", "3"};
  auto key = derived_->KeyOf("blog_posts", parts);
  ASSERT_TRUE(key);
  EXPECT_EQ(*key, "blog_posts:7:3");
  EXPECT_EQ(Value(*key), 4);
  EXPECT_FALSE(derived_->KeyOf("blog_posts", std::span(parts, 1)));
  const std::string_view bad[] = {"7", "three"};
  EXPECT_FALSE(derived_->KeyOf("blog_posts", bad));
  EXPECT_EQ(derived_->KeyOf("nope", parts).error().code, ErrorCode::kNotFound);

  auto blog7 = derived_->PrefixOf("blog_posts", std::span(parts, 1));
  ASSERT_TRUE(blog7);
  auto top = derived_->Top("blog_posts", *blog7, 3);
  ASSERT_TRUE(top);
  ASSERT_EQ(top->items.size(), 3u);
  EXPECT_EQ(top->items[0].key, "blog_posts:7:4");
  EXPECT_EQ(top->items[0].value, 5);
  EXPECT_EQ(top->items[2].key, "blog_posts:7:2");

  // Within the staleness bound a changed family may answer from the cache; past it, not.
  ASSERT_TRUE(Push(Insert(Post(99, 1, 7, 1, true))));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Push(Insert(Post(100 + i, 1, 7, 1, true))));
  auto cached = derived_->Top("blog_posts", *blog7, 3);
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->items[0].key, "blog_posts:7:4");
  clock_.Advance(DerivedOptions{}.top_k_max_staleness_ms);
  auto fresh = derived_->Top("blog_posts", *blog7, 3);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->items[0].key, "blog_posts:7:1");
  EXPECT_EQ(fresh->items[0].value, 8);

  auto listing = derived_->List("blog_posts", *blog7, "", 100);
  ASSERT_TRUE(listing);
  EXPECT_EQ(listing->items.size(), 5u);
  EXPECT_TRUE(listing->next_cursor.empty());
}

// A counter without GROUP BY has one group, keyed by its name alone: it is listed, ranked,
// counted, repaired and protected like any group, before and after a restart (which
// rebuilds the family index from the keyspace).
TEST_F(DerivedCountersTest, ACounterWithoutKeyColumnsHasOneGroupLikeAnyOther) {
  Define(kBlogModel);
  Define("CREATE COUNTER live_total AS SELECT count(*) FROM posts WHERE is_published");
  ASSERT_TRUE(Push("[" + Insert(Post(1, 1, 7, 1, true)) + "," + Insert(Post(2, 1, 7, 1, true)) +
                   "," + Insert(Post(3, 2, 8, 1, false)) + "]"));
  auto groups = [&] {
    for (const CounterListing& counter : derived_->Counters()) {
      if (counter.name == "live_total") return counter.groups;
    }
    ADD_FAILURE() << "no counter live_total";
    return size_t{0};
  };
  auto check = [&](int64_t value) {
    SCOPED_TRACE(value);
    EXPECT_EQ(Value("live_total"), value);
    auto key = derived_->KeyOf("live_total", {});
    ASSERT_TRUE(key) << key.error().message;
    EXPECT_EQ(*key, "live_total");
    auto prefix = derived_->PrefixOf("live_total", {});
    ASSERT_TRUE(prefix) << prefix.error().message;
    EXPECT_EQ(*prefix, "live_total");
    const std::vector<KeyValue> want =
        value == 0 ? std::vector<KeyValue>{} : std::vector<KeyValue>{{"live_total", value}};
    auto listing = derived_->List("live_total", *prefix, "", 100);
    ASSERT_TRUE(listing) << listing.error().message;
    EXPECT_EQ(listing->items.size(), want.size());
    for (size_t i = 0; i < std::min(want.size(), listing->items.size()); ++i) {
      EXPECT_EQ(listing->items[i].key, want[i].key);
      EXPECT_EQ(listing->items[i].value, want[i].value);
    }
    EXPECT_TRUE(listing->next_cursor.empty());
    clock_.Advance(DerivedOptions{}.top_k_max_staleness_ms);  // past any cached top-K
    auto top = derived_->Top("live_total", *prefix, 10);
    ASSERT_TRUE(top) << top.error().message;
    EXPECT_EQ(top->items.size(), want.size());
    if (!top->items.empty()) {
      EXPECT_EQ(top->items[0].value, value);
    }
    EXPECT_EQ(groups(), want.size());
    EXPECT_TRUE(derived_->IsProtectedKey("live_total"));
    EXPECT_EQ(All().count("live_total"), want.size());
  };
  check(2);
  Restart();
  check(2);
  // It has no prefix to name: a part is refused, not read past the key columns.
  const std::string_view part[] = {"7"};
  EXPECT_EQ(derived_->PrefixOf("live_total", part).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(derived_->KeyOf("live_total", part).error().code, ErrorCode::kInvalidArgument);

  // tally verify's repair sets the group by its key; no other key is one of its groups.
  const KeyValue repaired{"live_total", 5};
  auto epoch = derived_->Repair("live_total", {&repaired, 1});
  ASSERT_TRUE(epoch) << epoch.error().message;
  engine_->committer().WaitDurable(*epoch);
  check(5);
  const KeyValue stray{"live_total:1", 1};
  EXPECT_EQ(derived_->Repair("live_total", {&stray, 1}).error().code, ErrorCode::kInvalidArgument);
  const KeyValue other{"live_totals", 1};
  EXPECT_EQ(derived_->Repair("live_total", {&other, 1}).error().code, ErrorCode::kInvalidArgument);
  const KeyValue back{"live_total", 2};
  ASSERT_TRUE(derived_->Repair("live_total", {&back, 1}));

  // Unpublishing both posts takes the group back to 0: it is deleted, and stays gone.
  ASSERT_TRUE(Push("[" + Update(Post(1, 1, 7, 1, true), Post(1, 1, 7, 1, false)) + "," +
                   Delete(Post(2, 1, 7, 1, true)) + "]"));
  check(0);
  Restart();
  check(0);
  ASSERT_TRUE(Push(Insert(Post(4, 1, 7, 1, true))));
  check(1);

  // Dropping deletes the group and frees the name.
  ASSERT_TRUE(derived_->Drop("live_total"));
  EXPECT_EQ(Value("live_total"), 0);
  EXPECT_FALSE(derived_->IsProtectedKey("live_total"));
}

// A counter owns its name as a key too (the one group when it has no key columns): a plain
// counter of that name refuses its CREATE, and plain writes to it are refused after.
TEST_F(DerivedCountersTest, APlainCounterNamedLikeTheCounterRefusesItsCreate) {
  Define(kBlogModel);
  {
    const engine::HashedKey key("live_total");
    engine::View view = engine_->keyspace().Lock(key);
    ASSERT_TRUE(view.IncrBy(key, 1));
  }
  auto refused = derived_->Execute(
      "CREATE COUNTER live_total AS SELECT count(*) FROM posts WHERE is_published");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("e.g. 'live_total'"), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(derived_->IsProtectedKey("live_total"));
  EXPECT_TRUE(derived_->IsProtectedKey("blog_posts"));
  EXPECT_FALSE(derived_->IsProtectedKey("blog_posts_x"));
}

}  // namespace
}  // namespace tally::derived
