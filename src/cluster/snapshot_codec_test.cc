#include "cluster/snapshot_codec.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::cluster {
namespace {

SnapshotManifest Sample() {
  SnapshotManifest manifest;
  manifest.partition = 7;
  manifest.id = 18446744073709551615ull;
  manifest.position = {1200, 1001, 42};
  manifest.first_seq = 30;
  manifest.last_seq = 34;
  manifest.chunks = 4;
  manifest.counters = 123456;
  return manifest;
}

TEST(SnapshotCodecTest, AManifestRoundTrips) {
  const SnapshotManifest manifest = Sample();
  auto decoded = DecodeManifest(EncodeManifest(manifest));
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded->partition, 7u);
  EXPECT_EQ(decoded->id, manifest.id);
  EXPECT_EQ(decoded->position, manifest.position);
  EXPECT_EQ(decoded->first_seq, 30u);
  EXPECT_EQ(decoded->last_seq, 34u);
  EXPECT_EQ(decoded->chunks, 4u);
  EXPECT_EQ(decoded->counters, 123456u);
}

TEST(SnapshotCodecTest, AnythingButAManifestIsRefused) {
  const std::string good = EncodeManifest(Sample());
  EXPECT_FALSE(DecodeManifest(""));
  EXPECT_FALSE(DecodeManifest(good + "\n"));
  EXPECT_FALSE(DecodeManifest(good.substr(0, good.size() - 1) + "x"));
  EXPECT_FALSE(DecodeManifest(good.substr(0, good.rfind('\n'))));  // no counters line
  std::string zero = good;
  zero.replace(zero.find("seq 1200"), 8, "seq 01200");
  EXPECT_FALSE(DecodeManifest(zero));  // one spelling per number
  std::string swapped = good;
  swapped.replace(swapped.find("term"), 4, "mret");
  EXPECT_FALSE(DecodeManifest(swapped));
  SnapshotManifest no_chunks = Sample();
  no_chunks.chunks = 0;
  EXPECT_FALSE(DecodeManifest(EncodeManifest(no_chunks)));
  SnapshotManifest too_many = Sample();
  too_many.chunks = 6;  // 5 sequences
  EXPECT_FALSE(DecodeManifest(EncodeManifest(too_many)));
  SnapshotManifest partition = Sample();
  partition.partition = 70000;
  EXPECT_FALSE(DecodeManifest(EncodeManifest(partition)));
}

TEST(SnapshotCodecTest, AChunkCarriesItsIdIndexAndRecord) {
  const std::string bytes = EncodeChunkPrefix(99, 3) + "record bytes";
  auto chunk = DecodeChunk(bytes);
  ASSERT_TRUE(chunk) << chunk.error().message;
  EXPECT_EQ(chunk->id, 99u);
  EXPECT_EQ(chunk->index, 3u);
  EXPECT_EQ(chunk->record, "record bytes");
  EXPECT_FALSE(DecodeChunk("tally-snapshot-chunk 1 99\nx"));
  EXPECT_FALSE(DecodeChunk("tally-snapshot-chunk 1 99 -3\nx"));
  EXPECT_FALSE(DecodeChunk("tally-snapshot-chunk 1 99 3"));
  EXPECT_FALSE(DecodeChunk("tally-snapshot-chunk 2 99 3\nx"));
}

TEST(SnapshotCodecTest, ACatalogSnapshotRoundTripsWhateverItsRecordsHold) {
  CatalogSnapshot snapshot;
  snapshot.seq = 1234;
  snapshot.records = {{"cluster/ddl", "1234"},
                      {"counter/x", "CREATE COUNTER x AS SELECT a, count(*) FROM t GROUP BY a"},
                      {std::string("odd\n name ", 11), std::string("\0\n1 2", 6)},
                      {"backfill/y", ""}};
  const std::string bytes = EncodeCatalogSnapshot(snapshot);
  auto decoded = DecodeCatalogSnapshot(bytes);
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded->seq, 1234u);
  EXPECT_EQ(decoded->records, snapshot.records);
  EXPECT_TRUE(DecodeCatalogSnapshot("tally-catalog 1 0 0\n"));
  for (const std::string& bad :
       {std::string("tally-catalog 2 1 0\n"), bytes.substr(0, bytes.size() - 1), bytes + "x",
        std::string("tally-catalog 1 01 0\n"), std::string("tally-catalog 1 1 1\n3 1 abcd"),
        std::string("tally-catalog 1 1 1\n3 1 abc\n"),
        std::string("tally-catalog 1 1 2\n1 1 ab\n")}) {
    EXPECT_FALSE(DecodeCatalogSnapshot(bad)) << bad;
  }
}

}  // namespace
}  // namespace tally::cluster
