// The blog model's posts source, shared by the tests (test_util.h) and the fuzzers (fuzz/) of
// definitions; free of GoogleTest, so that the fuzzers can include it.
#pragma once

#include <string_view>

#include "engine/definitions/program.h"

namespace tally::definitions::testing {

// posts of the blog model (a blog's posts, by author, published or not, deleted or not, with
// a rating): the source the definition tests count over. Column indexes are the constants below.
inline const SourceSchema& PostsSchema() {
  static const SourceSchema kPosts{"posts",
                                   {{"id", Type::kInt64},
                                    {"user_id", Type::kInt64},
                                    {"blog_id", Type::kInt64},
                                    {"rating", Type::kInt64},
                                    {"is_published", Type::kBool},
                                    {"is_deleted", Type::kBool},
                                    {"created_at", Type::kTimestamp},
                                    {"title", Type::kText},
                                    {"status", Type::kText}}};
  return kPosts;
}
enum PostColumn {
  kId,
  kUserId,
  kBlogId,
  kRating,
  kIsPublished,
  kIsDeleted,
  kCreatedAt,
  kTitle,
  kStatus,
  kPostColumns
};

inline const SourceSchema* PostsCatalog(std::string_view name) {
  return name == "posts" ? &PostsSchema() : nullptr;
}

}  // namespace tally::definitions::testing
