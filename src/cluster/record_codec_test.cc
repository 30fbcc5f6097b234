#include "cluster/record_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "core/crc32c.h"

namespace tally::cluster {
namespace {

using namespace std::string_literals;
using engine::CommitBatch;
using engine::CounterRecord;

RecordHeader Header(uint32_t partition = 3) {
  RecordHeader header;
  header.partition = partition;
  header.term = 1234567;
  header.writer = 0xFEDCBA9876543210ull;
  header.epoch = 99;
  header.owner_unix_ms = 1764000000123;
  return header;
}

void ExpectHeader(const RecordHeader& got, const RecordHeader& want) {
  EXPECT_EQ(got.partition, want.partition);
  EXPECT_EQ(got.term, want.term);
  EXPECT_EQ(got.writer, want.writer);
  EXPECT_EQ(got.epoch, want.epoch);
  EXPECT_EQ(got.owner_unix_ms, want.owner_unix_ms);
}

// The batch's operations as a map (key -> record, or nullopt for a delete) plus its clear.
struct Ops {
  bool clear = false;
  std::map<std::string, std::optional<std::pair<int64_t, int64_t>>> keys;
  bool operator==(const Ops&) const = default;
};

Ops OpsOf(const CommitBatch& batch) {
  Ops ops;
  ops.clear = batch.clear_all();
  for (size_t i = 0; i < batch.delete_count(); ++i) ops.keys[std::string(batch.delete_key(i))];
  for (size_t i = 0; i < batch.put_count(); ++i) {
    const CounterRecord& record = batch.put_record(i);
    ops.keys[std::string(batch.put_key(i))] = std::make_pair(record.value, record.deadline_ms);
  }
  return ops;
}

CommitBatch SampleBatch() {
  CommitBatch batch;
  batch.ClearAll();
  batch.AddDelete("gone");
  batch.AddDelete("\x00\xff{tag}"s);
  batch.AddPut("likes:{post7}", CounterRecord{42, 0});
  batch.AddPut("", CounterRecord{-1, 0});
  batch.AddPut("min", CounterRecord{std::numeric_limits<int64_t>::min(), 1});
  batch.AddPut("max", CounterRecord{std::numeric_limits<int64_t>::max(), 1764000000000});
  batch.AddPut(std::string(1000, 'k'), CounterRecord{0, 0});
  return batch;
}

// Replaces the checksum of an encoded record with the right one for its (edited) bytes.
void Reseal(std::string* record) {
  record->resize(record->size() - 4);
  const uint32_t crc = Crc32c(record->data(), record->size());
  for (int i = 0; i < 4; ++i) record->push_back(static_cast<char>(crc >> (8 * i)));
}

TEST(RecordCodecTest, BatchRoundTrip) {
  const CommitBatch batch = SampleBatch();
  std::string bytes;
  EncodeBatch(Header(), batch, BatchShare::All(batch), &bytes);
  auto record = DecodeRecord(bytes);
  ASSERT_TRUE(record) << record.error().message;
  EXPECT_EQ(record->kind, RecordKind::kBatch);
  ExpectHeader(record->header, Header());
  EXPECT_EQ(OpsOf(record->batch), OpsOf(batch));
  EXPECT_EQ(record->batch.epoch(), 99u);
  // Order within a kind is kept: operations apply in order.
  ASSERT_EQ(record->batch.put_count(), batch.put_count());
  for (size_t i = 0; i < batch.put_count(); ++i) {
    EXPECT_EQ(record->batch.put_key(i), batch.put_key(i));
  }
}

TEST(RecordCodecTest, APartOfAGroupHasTheBatchsBody) {
  const CommitBatch batch = SampleBatch();
  std::string bytes;
  EncodeBatch(Header(), batch, BatchShare::All(batch), &bytes, RecordKind::kPart);
  auto record = DecodeRecord(bytes);
  ASSERT_TRUE(record) << record.error().message;
  EXPECT_EQ(record->kind, RecordKind::kPart);
  ExpectHeader(record->header, Header());
  EXPECT_EQ(OpsOf(record->batch), OpsOf(batch));
  EXPECT_EQ(RecordKindName(RecordKind::kPart), "part");
  // Only the kind byte differs from the same batch as a last record.
  std::string last;
  EncodeBatch(Header(), batch, BatchShare::All(batch), &last);
  ASSERT_EQ(last.size(), bytes.size());
  EXPECT_EQ(last[4], 1);
  EXPECT_EQ(bytes[4], 4);
  EXPECT_EQ(last.substr(5, last.size() - 9), bytes.substr(5, bytes.size() - 9));
}

TEST(RecordCodecTest, SmallRecordsStayShort) {
  CommitBatch batch;
  batch.AddPut("k", CounterRecord{-1, 0});
  std::string bytes;
  EncodeBatch(RecordHeader{0, 1, 1, 0, 0}, batch, BatchShare::All(batch), &bytes);
  // magic 4, kind 1, header 1+1+8+1+8, flags 1, counts 2, key 2, value 1, deadline 1, crc 4
  EXPECT_EQ(bytes.size(), 35u);
  auto record = DecodeRecord(bytes);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->batch.put_record(0).value, -1);
}

TEST(RecordCodecTest, ClaimAndRenewRoundTrip) {
  ClaimBody claim{"t1", std::string(40, 'a'), "127.0.0.1:7001", "127.0.0.1:7101", 1234566, 17};
  std::string bytes;
  EncodeClaim(Header(), claim, &bytes);
  auto record = DecodeRecord(bytes);
  ASSERT_TRUE(record) << record.error().message;
  EXPECT_EQ(record->kind, RecordKind::kClaim);
  ExpectHeader(record->header, Header());
  EXPECT_EQ(record->claim.node_name, "t1");
  EXPECT_EQ(record->claim.node_id, std::string(40, 'a'));
  EXPECT_EQ(record->claim.redis_address, "127.0.0.1:7001");
  EXPECT_EQ(record->claim.http_address, "127.0.0.1:7101");
  EXPECT_EQ(record->claim.caught_up_to, 1234566u);
  EXPECT_EQ(record->claim.previous_term, 17u);

  EncodeRenew(Header(7), &bytes);
  record = DecodeRecord(bytes);
  ASSERT_TRUE(record) << record.error().message;
  EXPECT_EQ(record->kind, RecordKind::kRenew);
  ExpectHeader(record->header, Header(7));
  EXPECT_EQ(RecordKindName(RecordKind::kRenew), "renew");
}

TEST(RecordCodecTest, SharesSplitByPartitionAndCoverTheBatch) {
  CommitBatch batch;
  for (int i = 0; i < 500; ++i) batch.AddPut("key:" + std::to_string(i), CounterRecord{i, 0});
  for (int i = 0; i < 100; ++i) batch.AddDelete("old:" + std::to_string(i));
  batch.AddPut("a{same}", CounterRecord{1, 0});
  batch.AddPut("b{same}", CounterRecord{2, 0});
  const uint32_t partitions = 12;
  const std::vector<BatchShare> shares = SplitBatch(batch, partitions);
  ASSERT_EQ(shares.size(), partitions);
  Ops merged;
  size_t operations = 0;
  for (uint32_t p = 0; p < partitions; ++p) {
    EXPECT_FALSE(shares[p].empty()) << "600 keys leave no partition of 12 empty";
    operations += shares[p].operations();
    std::string bytes;
    EncodeBatch(Header(p), batch, shares[p], &bytes);
    auto record = DecodeRecord(bytes);
    ASSERT_TRUE(record) << record.error().message;
    EXPECT_EQ(record->header.partition, p);
    const Ops ops = OpsOf(record->batch);
    for (const auto& [key, value] : ops.keys) {
      EXPECT_EQ(SlotPartition(KeySlot(key), partitions), p) << key;
      EXPECT_TRUE(merged.keys.emplace(key, value).second) << key << " in two shares";
    }
  }
  EXPECT_EQ(operations, 602u);
  EXPECT_EQ(merged, OpsOf(batch));
  EXPECT_EQ(SlotPartition(KeySlot("a{same}"), partitions),
            SlotPartition(KeySlot("b{same}"), partitions));

  // A clear goes to every partition, even one with no key of the batch.
  CommitBatch flush;
  flush.ClearAll();
  for (const BatchShare& share : SplitBatch(flush, 5)) {
    EXPECT_TRUE(share.clear);
    EXPECT_EQ(share.operations(), 1u);
  }
  EXPECT_TRUE(SplitBatch(CommitBatch(), 5)[4].empty());
}

TEST(RecordCodecTest, EveryFlippedBitAndEveryTruncationIsRefused) {
  const CommitBatch batch = SampleBatch();
  std::string good;
  EncodeBatch(Header(), batch, BatchShare::All(batch), &good);
  for (size_t i = 0; i < good.size(); ++i) {
    for (const int bit : {0, 3, 7}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      EXPECT_FALSE(DecodeRecord(bad)) << "byte " << i << " bit " << bit;
    }
  }
  for (size_t length = 0; length < good.size(); ++length) {
    EXPECT_FALSE(DecodeRecord(std::string_view(good).substr(0, length))) << length;
  }
  EXPECT_FALSE(DecodeRecord(good + "x"));
}

TEST(RecordCodecTest, WellSealedNonsenseIsRefused) {
  std::string renew;
  EncodeRenew(Header(), &renew);
  // kind 9
  std::string bad = renew;
  bad[4] = 9;
  Reseal(&bad);
  auto record = DecodeRecord(bad);
  ASSERT_FALSE(record);
  EXPECT_EQ(record.error().code, ErrorCode::kCorruption);
  EXPECT_EQ(record.error().message, "cluster record: unknown kind 9");
  // a renew with a byte more before the checksum
  bad = renew;
  bad.insert(bad.size() - 4, "\x01");
  Reseal(&bad);
  EXPECT_EQ(DecodeRecord(bad).error().message, "cluster record: trailing bytes");
  // a partition number past the largest
  RecordHeader header = Header();
  header.partition = kMaxPartitions;
  EncodeRenew(header, &bad);
  EXPECT_EQ(DecodeRecord(bad).error().message, "cluster record: bad header");
  // unknown batch flags
  CommitBatch batch;
  batch.AddPut("k", CounterRecord{1, 0});
  EncodeBatch(Header(0), batch, BatchShare::All(batch), &bad);
  // magic, kind, then partition 1 byte, term 3, writer 8, epoch 1, unix ms 8
  const size_t flags_at = 4 + 1 + 1 + 3 + 8 + 1 + 8;
  ASSERT_EQ(bad[flags_at], '\0');
  bad[flags_at] = 2;
  Reseal(&bad);
  EXPECT_EQ(DecodeRecord(bad).error().message, "cluster record: bad batch flags");
  // a put count larger than what follows (after the flags: delete count, put count)
  EncodeBatch(Header(0), batch, BatchShare::All(batch), &bad);
  ASSERT_EQ(bad[flags_at + 2], '\x01');
  bad[flags_at + 2] = 100;
  Reseal(&bad);
  EXPECT_EQ(DecodeRecord(bad).error().message, "cluster record: truncated batch");
  // a varint longer than 64 bits
  bad = "TLB1\x01"s + std::string(10, '\xff') + "\x01"s + std::string(20, '\0');
  bad += "0000";
  Reseal(&bad);
  EXPECT_EQ(DecodeRecord(bad).error().message, "cluster record: bad header");
  EXPECT_EQ(DecodeRecord("nonsense at all").error().message, "cluster record: not a tally record");
}

TEST(RecordCodecTest, OwnershipFilterFollowsClaims) {
  std::string bytes;
  RecordHeader a{0, 5, 111, 0, 0};
  RecordHeader b{0, 8, 222, 0, 0};
  EncodeClaim(a, ClaimBody{}, &bytes);
  const Record claim_a = *DecodeRecord(bytes);
  EncodeClaim(b, ClaimBody{}, &bytes);
  const Record claim_b = *DecodeRecord(bytes);
  EncodeRenew(a, &bytes);
  const Record of_a = *DecodeRecord(bytes);
  EncodeRenew(b, &bytes);
  const Record of_b = *DecodeRecord(bytes);
  RecordHeader same_term_other_writer = a;
  same_term_other_writer.writer = 333;
  EncodeRenew(same_term_other_writer, &bytes);
  const Record impostor = *DecodeRecord(bytes);

  OwnershipFilter filter;
  EXPECT_FALSE(filter.Accept(4, of_a)) << "nothing counts before the first claim";
  EXPECT_FALSE(filter.Accept(4, claim_a)) << "a claim lands at its own term";
  EXPECT_TRUE(filter.Accept(5, claim_a));
  EXPECT_TRUE(filter.Accept(6, of_a));
  EXPECT_FALSE(filter.Accept(7, impostor));
  EXPECT_FALSE(filter.Accept(7, of_b));
  EXPECT_TRUE(filter.Accept(8, claim_b));
  EXPECT_FALSE(filter.Accept(9, of_a)) << "the previous owner's record after a newer claim";
  EXPECT_TRUE(filter.Accept(10, of_b));
  EXPECT_EQ(filter.term(), 8u);
  EXPECT_EQ(filter.writer(), 222u);
  // Resumed from a saved position: the ownership in force is given.
  OwnershipFilter resumed(5, 111);
  EXPECT_TRUE(resumed.Accept(20, of_a));
}

}  // namespace
}  // namespace tally::cluster
