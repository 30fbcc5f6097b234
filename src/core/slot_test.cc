#include "core/slot.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace tally {
namespace {

using namespace std::string_literals;

// The check value of CRC-16/XMODEM, and the example of the Redis Cluster specification
// (cluster-spec.md, "Keys distribution model": the CRC16 of "123456789" is 0x31C3).
TEST(SlotTest, Crc16CheckValues) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
  EXPECT_EQ(Crc16("A"), 0x58E5);
  EXPECT_EQ(KeySlot("123456789"), 0x31C3u % kSlotCount);
}

// Answers of redis-server 7.0.15 (Debian 12) to CLUSTER KEYSLOT for each key. Produced by
// starting `redis-server --port 0 --unixsocket <dir>/r.sock --cluster-enabled yes` in a temp
// dir and sending `CLUSTER KEYSLOT <key>` with redis-cli (text keys) and python3-redis
// (binary keys); recorded here so that the test needs no server.
TEST(SlotTest, AgreesWithRedisServer) {
  const std::vector<std::pair<std::string, uint32_t>> cases = {
      {"123456789", 12739},
      {"foo", 12182},
      {"bar", 5061},
      {"user:{42}:x", 8000},
      {"{user1000}.following", 3443},
      {"{user1000}.followers", 3443},
      {"foo{}{bar}", 8363},     // the first '{' opens an empty tag: the whole key hashes
      {"foo{{bar}}zap", 4015},  // the tag is "{bar"
      {"foo{bar}{zap}", 5061},  // only the first tag counts: "bar"
      {"{}", 15257},
      {"{", 4092},
      {"}", 12090},
      {"", 0},
      {"a{b", 13340},
      {"likes:{post7}", 5067},
      {"hello world", 15332},
      {"{ab}c", 13567},
      {"x{}y", 16116},
      {"{}{a}", 13650},
      {"p0", 15882},
      {"p11", 2270},
      {"\xff\x00\x01"s, 8002},
      {"\x00"s, 0},
      {"{\x00}x"s, 0},
      {std::string(300, 'a'), 14126},
      {"{a}" + std::string(100, 'b'), 15495},
  };
  for (const auto& [key, slot] : cases) {
    EXPECT_EQ(KeySlot(key), slot) << "key of " << key.size() << " bytes: " << key;
  }
}

TEST(SlotTest, HashTagsShareASlot) {
  EXPECT_EQ(KeySlot("likes:{post7}:day"), KeySlot("post7"));
  EXPECT_EQ(KeySlot("{post7}"), KeySlot("views:{post7}"));
  EXPECT_NE(KeySlot("likes:{post7}"), KeySlot("likes:{post8}"));
}

TEST(SlotTest, PartitionsCoverEverySlotOnceInOrder) {
  for (const uint32_t count : {1u, 2u, 3u, 7u, 12u, 24u, 256u, 1000u, kMaxPartitions}) {
    uint32_t next = 0;
    for (uint32_t p = 0; p < count; ++p) {
      const SlotRange range = PartitionSlots(p, count);
      ASSERT_EQ(range.first, next) << "P=" << count << " p=" << p;
      ASSERT_LE(range.first, range.last);
      next = range.last + 1;
    }
    EXPECT_EQ(next, kSlotCount) << "P=" << count;
    for (uint32_t slot = 0; slot < kSlotCount; ++slot) {
      const uint32_t p = SlotPartition(slot, count);
      ASSERT_LT(p, count);
      const SlotRange range = PartitionSlots(p, count);
      ASSERT_TRUE(slot >= range.first && slot <= range.last) << "P=" << count << " slot " << slot;
    }
  }
  EXPECT_EQ(PartitionSlots(0, 12).last, 1364u);  // 16384 / 12 = 1365.33
  EXPECT_EQ(PartitionSlots(11, 12).first, 15018u);
}

TEST(SlotTest, PartitionTagsFallInTheirPartition) {
  for (const uint32_t count : {1u, 3u, 12u, 256u}) {
    for (uint32_t p = 0; p < count; ++p) {
      const std::string tag = PartitionTag(p, count);
      ASSERT_FALSE(tag.empty());
      EXPECT_EQ(SlotPartition(KeySlot(tag), count), p) << tag;
      EXPECT_EQ(SlotPartition(KeySlot("\0pos:ctl{"s + tag + "}"), count), p);
    }
  }
  EXPECT_EQ(PartitionTag(0, 1), "p0");
  // Single-slot partitions: still found.
  for (const uint32_t p : {0u, 1u, 8000u, kMaxPartitions - 1}) {
    EXPECT_EQ(KeySlot(PartitionTag(p, kMaxPartitions)), p);
  }
}

}  // namespace
}  // namespace tally
