// Fixtures of the change decoder's tests (change_json_test.cc, change_cell_test.cc,
// change_json_volume_test.cc): two sources, a lookup, and helpers that decode a body.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/definitions/test_util.h"
#include "engine/derived/change_json.h"

namespace tally::derived::testing {

using definitions::SourceSchema;
using definitions::Type;
using definitions::Value;
namespace posts = definitions::testing;

// The blog posts source (definitions/test_util.h), with the counters blog_posts and
// author_rating reading some columns.
inline const SourceView& PostsView() {
  static const SourceView kView{
      &posts::PostsSchema(),
      {"", "blog_posts", "blog_posts", "author_rating", "blog_posts", "blog_posts", "", "", ""}};
  return kView;
}

// likes: nothing reads its columns.
inline const SourceView& LikesView() {
  static const SourceSchema kSchema{
      "likes", {{"post_id", Type::kInt64}, {"user_id", Type::kInt64}, {"at", Type::kTimestamp}}};
  static const SourceView kView{&kSchema, {"", "", ""}};
  return kView;
}

inline const SourceView* Lookup(std::string_view name) {
  if (name == "posts") return &PostsView();
  if (name == "likes") return &LikesView();
  return nullptr;
}

// Decodes and expects success.
inline std::span<const DecodedChange> MustDecode(ChangeDecoder& decoder, std::string_view body) {
  auto decoded = decoder.Decode(body, Lookup);
  EXPECT_TRUE(decoded) << body << "\n" << decoded.error().message;
  return decoded ? *decoded : std::span<const DecodedChange>();
}

// The message of a failed decode ("" when it succeeded).
inline std::string DecodeError(std::string_view body) {
  ChangeDecoder decoder;
  auto decoded = decoder.Decode(body, Lookup);
  if (decoded) return "";
  EXPECT_EQ(decoded.error().code, ErrorCode::kInvalidArgument);
  return decoded.error().message;
}

// A posts row as JSON with the columns blog_posts and author_rating need, and `extra`.
inline std::string PostRow(int64_t user, std::string_view extra = "") {
  return "{\"user_id\": " + std::to_string(user) +
         ", \"blog_id\": 3, \"rating\": 5, \"is_published\": true, \"is_deleted\": false" +
         std::string(extra) + "}";
}

// prefix followed by n in decimal ("c" + std::to_string(n) trips GCC 12's -Wrestrict).
inline std::string Numbered(std::string_view prefix, size_t n) {
  std::string out(prefix);
  out += std::to_string(n);
  return out;
}

}  // namespace tally::derived::testing
