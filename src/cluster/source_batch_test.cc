// A source consumer's batch body (source_batch.h): what the writers make, the parser reads
// back; a body a consumer did not write is refused whole, never half applied or crashed on.
#include "cluster/source_batch.h"

#include <gtest/gtest.h>

namespace tally::cluster {
namespace {

TEST(SourceBatchTest, WhatIsWrittenReadsBack) {
  std::string body;
  AppendRowsHead(100, 1, "posts,likes", &body);
  body += "{\"source\":\"posts\",\"new\":{\"id\":1}}\n{\"source\":\"likes\",\"new\":{\"id\":2}}\n";
  AppendTruncate(100, 2, "posts", &body);
  AppendRowsHead(100, 3, "posts,likes", &body);
  body += "{\"source\":\"posts\",\"old\":{\"id\":1}}\n";
  AppendAt(120, "posts,likes", &body);
  auto segments = ParseBatch(body);
  ASSERT_TRUE(segments) << segments.error().message;
  ASSERT_EQ(segments->size(), 4u);
  const auto& s = *segments;
  EXPECT_EQ(s[0].kind, BatchSegment::Kind::kRows);
  EXPECT_EQ(s[0].lsn, 100);
  EXPECT_EQ(s[0].part, 1);
  EXPECT_EQ(s[0].sources, "posts,likes");
  EXPECT_EQ(
      s[0].rows,
      "{\"source\":\"posts\",\"new\":{\"id\":1}}\n{\"source\":\"likes\",\"new\":{\"id\":2}}\n");
  EXPECT_EQ(s[1].kind, BatchSegment::Kind::kTruncate);
  EXPECT_EQ(s[1].part, 2);
  EXPECT_EQ(s[1].sources, "posts");
  EXPECT_TRUE(s[1].rows.empty());
  EXPECT_EQ(s[2].part, 3);
  EXPECT_EQ(s[2].rows, "{\"source\":\"posts\",\"old\":{\"id\":1}}\n");
  EXPECT_EQ(s[3].kind, BatchSegment::Kind::kAt);
  EXPECT_EQ(s[3].lsn, 120);
  EXPECT_EQ(s[3].sources, "posts,likes");
  EXPECT_EQ(Split(s[3].sources, ','), (std::vector<std::string_view>{"posts", "likes"}));
}

TEST(SourceBatchTest, AnythingElseIsRefusedWhole) {
  for (const std::string_view body : {
           std::string_view("\n"),                           // an empty head
           std::string_view("{\"source\":\"posts\"}\n"),     // rows before any head
           std::string_view("#rows 100 1\n{}\n"),            // no sources
           std::string_view("#rows 100 1 \n{}\n"),           // empty sources
           std::string_view("#rows x 1 posts\n{}\n"),        // not a number
           std::string_view("#rows -5 1 posts\n{}\n"),       // a negative LSN
           std::string_view("#rows 100 -1 posts\n{}\n"),     // a negative part
           std::string_view("#truncate 100 1 posts\n{}\n"),  // rows after a truncate
           std::string_view("#at 100\n"),                    // no sources
           std::string_view("#at 100 1 posts\n"),            // one field too many
           std::string_view("#drop 100 1 posts\n"),          // no such kind
           std::string_view("#rows 100 1 posts\n{}\n#"),     // a last head that is nothing
       }) {
    auto segments = ParseBatch(body);
    EXPECT_FALSE(segments) << body;
    if (!segments) {
      EXPECT_NE(segments.error().message.find("bad segment"), std::string::npos);
    }
  }
  EXPECT_EQ(Split("", ','), (std::vector<std::string_view>{""}));
}

TEST(SourceBatchTest, ARepairsGroupsReadBackWhateverTheirKeysHold) {
  const std::vector<derived::KeyValue> values = {
      {"post_likes:1", 12}, {std::string("a b\n\0c", 6), -4}, {"", 0}};
  const std::string body = EncodeGroupValues(values);
  auto decoded = DecodeGroupValues(body);
  ASSERT_TRUE(decoded) << decoded.error().message;
  ASSERT_EQ(decoded->size(), 3u);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ((*decoded)[i].key, values[i].key);
    EXPECT_EQ((*decoded)[i].value, values[i].value);
  }
  EXPECT_TRUE(DecodeGroupValues("")->empty());
  for (const std::string_view bad :
       {"3 1 ab\n", "2 1 ab", "x 1 ab\n", "2 y ab\n", "-1 1 \n", "2 1"}) {
    EXPECT_FALSE(DecodeGroupValues(bad)) << bad;
  }
}

}  // namespace
}  // namespace tally::cluster
