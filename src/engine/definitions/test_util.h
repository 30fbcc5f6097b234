// Helpers shared by the tests of definitions: the blog model's sources and a row builder.
#pragma once

#include <string_view>
#include <vector>

#include "engine/definitions/compiler.h"
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

// A posts row of NULLs, to be filled column by column.
inline std::vector<Value> NullPost() { return std::vector<Value>(kPostColumns); }

// Compiles `sql` against posts. REQUIRES: it compiles (fails the test otherwise).
inline CompiledCounter MustCompile(std::string_view sql) {
  auto compiled = CompileSql(sql, PostsCatalog);
  EXPECT_TRUE(compiled.has_value()) << sql << ": " << compiled.error().message;
  return compiled ? std::move(*compiled) : CompiledCounter();
}

}  // namespace tally::definitions::testing
