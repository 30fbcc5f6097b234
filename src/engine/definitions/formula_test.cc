// Tests of the universal formula on the blog model (posts, test_util.h): each kind of change by
// hand, then random changes whose summed increments must equal a recount.
#include "engine/definitions/formula.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/definitions/test_util.h"

namespace tally::definitions {
namespace {

using testing::MustCompile;

constexpr std::string_view kBlogPosts =
    "CREATE COUNTER blog_posts AS SELECT user_id, blog_id, count(*) FROM posts "
    "WHERE is_published AND NOT is_deleted GROUP BY user_id, blog_id";
constexpr std::string_view kAuthorRating =
    "CREATE COUNTER author_rating AS SELECT user_id, blog_id, sum(rating) FROM posts "
    "WHERE is_published AND NOT is_deleted GROUP BY user_id, blog_id";

// A post of the blog model.
struct Post {
  int64_t user_id = 1;
  int64_t blog_id = 7;
  std::optional<int64_t> rating = 4;
  bool is_published = false;
  bool is_deleted = false;
  std::string title = "hello";

  std::vector<Value> Row() const {
    std::vector<Value> row = testing::NullPost();
    row[testing::kId] = Value::Int(1);
    row[testing::kUserId] = Value::Int(user_id);
    row[testing::kBlogId] = Value::Int(blog_id);
    row[testing::kRating] = rating ? Value::Int(*rating) : Value::Null();
    row[testing::kIsPublished] = Value::Bool(is_published);
    row[testing::kIsDeleted] = Value::Bool(is_deleted);
    row[testing::kCreatedAt] = Value::Timestamp(1'700'000'000'000'000);
    row[testing::kTitle] = Value::Text(title);
    return row;
  }
};

class FormulaTest : public ::testing::Test {
 protected:
  // The increments of blog_posts and author_rating for a change from `old` to `now`.
  std::vector<Increment> Change(const std::optional<Post>& old, const std::optional<Post>& now) {
    std::vector<Value> old_row;
    std::vector<Value> new_row;
    std::optional<RowView> old_view;
    std::optional<RowView> new_view;
    if (old) {
      old_row = old->Row();
      old_view = RowView(old_row);
    }
    if (now) {
      new_row = now->Row();
      new_view = RowView(new_row);
    }
    std::vector<Increment> out;
    EXPECT_TRUE(AppendIncrements(count_, old_view, new_view, scratch_, &out).has_value());
    EXPECT_TRUE(AppendIncrements(sum_, old_view, new_view, scratch_, &out).has_value());
    return out;
  }

  CompiledCounter count_ = MustCompile(kBlogPosts);
  CompiledCounter sum_ = MustCompile(kAuthorRating);
  EvalScratch scratch_;
};

using Incs = std::vector<Increment>;

TEST_F(FormulaTest, EveryKindOfChange) {
  Post draft;
  Post live = draft;
  live.is_published = true;

  // create: a draft counts nowhere, a published post counts once
  EXPECT_EQ(Change(std::nullopt, draft), Incs{});
  EXPECT_EQ(Change(std::nullopt, live), (Incs{{"blog_posts:1:7", 1}, {"author_rating:1:7", 4}}));
  // publish and unpublish
  EXPECT_EQ(Change(draft, live), (Incs{{"blog_posts:1:7", 1}, {"author_rating:1:7", 4}}));
  EXPECT_EQ(Change(live, draft), (Incs{{"blog_posts:1:7", -1}, {"author_rating:1:7", -4}}));
  // soft-delete and restore
  Post deleted = live;
  deleted.is_deleted = true;
  EXPECT_EQ(Change(live, deleted), (Incs{{"blog_posts:1:7", -1}, {"author_rating:1:7", -4}}));
  EXPECT_EQ(Change(deleted, live), (Incs{{"blog_posts:1:7", 1}, {"author_rating:1:7", 4}}));
  // move to another blog: the count moves
  Post moved = live;
  moved.blog_id = 8;
  EXPECT_EQ(Change(live, moved), (Incs{{"blog_posts:1:7", -1},
                                       {"blog_posts:1:8", 1},
                                       {"author_rating:1:7", -4},
                                       {"author_rating:1:8", 4}}));
  // change of author
  Post other_author = live;
  other_author.user_id = 2;
  EXPECT_EQ(Change(live, other_author), (Incs{{"blog_posts:1:7", -1},
                                              {"blog_posts:2:7", 1},
                                              {"author_rating:1:7", -4},
                                              {"author_rating:2:7", 4}}));
  // change of rating: one increment of the difference, none for the count
  Post rated = live;
  rated.rating = 9;
  EXPECT_EQ(Change(live, rated), (Incs{{"author_rating:1:7", 5}}));
  rated.rating = std::nullopt;  // a NULL rating adds nothing to sum
  EXPECT_EQ(Change(live, rated), (Incs{{"author_rating:1:7", -4}}));
  // a change no counter sees
  Post retitled = live;
  retitled.title = "new title";
  EXPECT_EQ(Change(live, retitled), Incs{});
  EXPECT_EQ(Change(live, live), Incs{});
  // delete
  EXPECT_EQ(Change(live, std::nullopt), (Incs{{"blog_posts:1:7", -1}, {"author_rating:1:7", -4}}));
  EXPECT_EQ(Change(draft, std::nullopt), Incs{});
  // a rating of 0 moves the count but not the sum
  Post zero = live;
  zero.rating = 0;
  Post zero_moved = zero;
  zero_moved.blog_id = 9;
  EXPECT_EQ(Change(zero, zero_moved), (Incs{{"blog_posts:1:7", -1}, {"blog_posts:1:9", 1}}));
}

TEST_F(FormulaTest, ErrorsNameTheCounterAndChangeNothing) {
  Post old;
  old.is_published = true;
  old.rating = -5;
  Post now = old;
  now.rating = INT64_MAX;  // -(-5) + INT64_MAX leaves int64
  std::vector<Value> old_row = old.Row();
  std::vector<Value> new_row = now.Row();
  std::vector<Increment> out{{"untouched", 1}};
  auto status = AppendIncrements(sum_, RowView(old_row), RowView(new_row), scratch_, &out);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, ErrorCode::kOverflow);
  EXPECT_EQ(status.error().message, "counter author_rating: bigint out of range");
  EXPECT_EQ(out, (Incs{{"untouched", 1}}));

  old.rating = INT64_MIN;  // cannot be negated
  old_row = old.Row();
  status = AppendIncrements(sum_, RowView(old_row), std::nullopt, scratch_, &out);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, ErrorCode::kOverflow);

  // A bad row names the counter and the side.
  new_row[testing::kUserId] = Value::Text("one");
  auto result = ComputeIncrements(count_, std::nullopt, RowView(new_row), scratch_);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().message,
            "counter blog_posts, new row: column user_id of source posts must be int64, not "
            "text");

  const CompiledCounter divide =
      MustCompile("CREATE COUNTER d AS SELECT sum(rating / (blog_id - 7)) FROM posts");
  result = ComputeIncrements(divide, RowView(old_row), std::nullopt, scratch_);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().message, "counter d, old row: division by zero");
}

// Random changes over a set of posts: the increments, summed, must always equal a recount
// of the current posts computed by the test itself.
TEST_F(FormulaTest, RandomChangesMatchRecount) {
  const CompiledCounter by_case = MustCompile(
      "CREATE COUNTER by_case AS SELECT blog_id, CASE WHEN rating IN (4, 5) THEN 'top' ELSE "
      "'rest' END AS tier, count(*) FROM posts WHERE is_published AND NOT is_deleted "
      "GROUP BY blog_id, tier");
  std::mt19937_64 rng(7);
  auto pick = [&](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  std::map<int, Post> posts;  // by id
  std::map<std::string, int64_t> counters;
  int next_id = 0;
  int nonempty_checks = 0;
  for (int step = 0; step < 20000; ++step) {
    std::optional<Post> old;
    std::optional<Post> now;
    int id;
    const int64_t kind = posts.empty() ? 0 : pick(0, 9);
    if (kind == 0) {  // create
      id = next_id++;
      Post p;
      p.user_id = pick(1, 4);
      p.blog_id = pick(1, 3);
      p.rating = pick(0, 5) == 0 ? std::optional<int64_t>() : pick(-2, 5);
      p.is_published = pick(0, 1) == 1;
      now = p;
    } else {
      auto it = posts.begin();
      std::advance(it, pick(0, static_cast<int64_t>(posts.size()) - 1));
      id = it->first;
      old = it->second;
      Post p = it->second;
      switch (kind) {
        case 1:
          p.is_published = true;
          break;  // publish
        case 2:
          p.is_published = false;
          break;  // unpublish
        case 3:
          p.is_deleted = true;
          break;  // soft-delete
        case 4:
          p.is_deleted = false;
          break;  // restore
        case 5:
          p.blog_id = pick(1, 3);
          break;  // move blog
        case 6:
          p.user_id = pick(1, 4);
          break;  // change author
        case 7:
          p.rating = pick(-2, 5);
          break;  // change rating
        case 8:
          p.title += "!";
          break;  // an edit no counter sees
        default:
          break;  // delete
      }
      if (kind != 9) now = p;
    }
    std::vector<Value> old_row = old ? old->Row() : std::vector<Value>();
    std::vector<Value> new_row = now ? now->Row() : std::vector<Value>();
    const std::optional<RowView> old_view = old ? std::optional<RowView>(old_row) : std::nullopt;
    const std::optional<RowView> new_view = now ? std::optional<RowView>(new_row) : std::nullopt;
    std::vector<Increment> incs;
    const CompiledCounter* const counters_of_posts[] = {&count_, &sum_, &by_case};
    for (const CompiledCounter* counter : counters_of_posts) {
      ASSERT_TRUE(AppendIncrements(*counter, old_view, new_view, scratch_, &incs).has_value());
    }
    for (const Increment& inc : incs) {
      ASSERT_NE(inc.delta, 0);
      counters[inc.key] += inc.delta;
      if (counters[inc.key] == 0) counters.erase(inc.key);
    }
    if (now) {
      posts[id] = *now;
    } else {
      posts.erase(id);
    }

    if (step % 100 != 99) continue;
    std::map<std::string, int64_t> recount;
    for (const auto& [post_id, p] : posts) {
      if (!p.is_published || p.is_deleted) continue;
      const std::string key = std::to_string(p.user_id) + ":" + std::to_string(p.blog_id);
      recount["blog_posts:" + key] += 1;
      if (p.rating) recount["author_rating:" + key] += *p.rating;
      const bool top = p.rating.has_value() && (*p.rating == 4 || *p.rating == 5);
      recount["by_case:" + std::to_string(p.blog_id) + (top ? ":top" : ":rest")] += 1;
    }
    std::erase_if(recount, [](const auto& entry) { return entry.second == 0; });
    ASSERT_EQ(counters, recount) << "after step " << step;
    nonempty_checks += recount.empty() ? 0 : 1;
  }
  EXPECT_GT(nonempty_checks, 150);  // the comparisons were not of empty maps
}

}  // namespace
}  // namespace tally::definitions
