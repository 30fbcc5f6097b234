// Membership: the heartbeat's bytes round-trip and anything malformed is refused; nodes on
// real nats-servers see each other, and a node that leaves says so.
#include "cluster/membership.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "cluster/nats_test_cluster.h"

namespace tally::cluster {
namespace {

using namespace std::chrono_literals;

MemberInfo SomeMember(char id) {
  MemberInfo info;
  info.node_id = std::string(40, id);
  info.node_name = std::string("node-") + id;
  info.redis_address = "127.0.0.1:7001";
  info.http_address = "127.0.0.1:7101";
  info.owned = {0, 3, 17};
  info.releasing = {3};
  info.change_floor = 4242;
  info.sequence = 123456789;
  return info;
}

TEST(MemberCodecTest, RoundTrips) {
  const MemberInfo info = SomeMember('a');
  auto decoded = DecodeMember(EncodeMember(info));
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded->node_id, info.node_id);
  EXPECT_EQ(decoded->node_name, info.node_name);
  EXPECT_EQ(decoded->redis_address, info.redis_address);
  EXPECT_EQ(decoded->http_address, info.http_address);
  EXPECT_EQ(decoded->owned, info.owned);
  EXPECT_EQ(decoded->releasing, info.releasing);
  EXPECT_FALSE(decoded->leaving);
  EXPECT_FALSE(decoded->draining);
  EXPECT_EQ(decoded->change_floor, info.change_floor);
  EXPECT_EQ(decoded->sequence, info.sequence);

  MemberInfo empty = SomeMember('b');
  empty.owned.clear();
  empty.releasing.clear();
  empty.http_address.clear();
  empty.leaving = true;
  empty.draining = true;
  decoded = DecodeMember(EncodeMember(empty));
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_TRUE(decoded->owned.empty());
  EXPECT_TRUE(decoded->leaving);
  EXPECT_TRUE(decoded->draining);
}

TEST(MemberCodecTest, RefusesWhatIsMalformed) {
  const std::string good = EncodeMember(SomeMember('c'));
  const auto replace = [&](std::string_view from, std::string_view to) {
    std::string bytes = good;
    bytes.replace(bytes.find(from), from.size(), to);
    return bytes;
  };
  for (const std::string& bad : {
           std::string(""),
           std::string("tally-member 2\n"),
           good + "\n",
           good.substr(0, good.size() - 1) + "x",
           replace("id cccc", "id Cccc"),
           replace("name node-c", "name "),
           replace("name node-c", "name node c"),
           replace("redis 127.0.0.1:7001", "redis nowhere"),
           replace("owned 0,3,17", "owned 3,0"),
           replace("owned 0,3,17", "owned 0,,3"),
           replace("owned 0,3,17", "owned 0,3,"),
           replace("owned 0,3,17", "owned 99999"),
           replace("owned 0,3,17", "owned 0,3,017"),
           replace("leaving 0", "leaving 2"),
           replace("draining 0", "draining 01"),
           replace("\ndraining 0", ""),
           replace("seq 123456789", "seq -1"),
           replace("changes 4242", "changes 04242"),
           replace("\nchanges 4242", ""),
           replace("\nhttp", "\nhttq"),
       }) {
    EXPECT_FALSE(DecodeMember(bad)) << bad;
  }
}

TEST(MembershipTest, NodesSeeEachOtherAndALeavingNodeSaysSo) {
  auto cluster = NatsTestCluster::Start();
  ASSERT_TRUE(cluster) << cluster.error().message;
  auto connection_a = (*cluster)->Connect();
  auto connection_b = (*cluster)->Connect();
  ASSERT_TRUE(connection_a && connection_b);
  MembershipOptions options;
  options.subject = "test.members";
  options.heartbeat_ms = 50;
  options.timeout_ms = 2000;
  auto a = Membership::Start(**connection_a, options, [] { return SomeMember('a'); });
  auto b = Membership::Start(**connection_b, options, [] { return SomeMember('b'); });
  ASSERT_TRUE(a && b);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (((*a)->Live().size() < 2 || (*b)->Live().size() < 2) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ((*a)->Live().size(), 2u);
  ASSERT_EQ((*b)->Live().size(), 2u);
  EXPECT_TRUE((*a)->IsLive(std::string(40, 'b')));
  EXPECT_EQ((*a)->Live()[1].info.owned, (std::vector<uint32_t>{0, 3, 17}));
  EXPECT_TRUE((*a)->Live()[0].self);

  (*b)->Leave();  // long before b's heartbeats would time out
  while ((*a)->IsLive(std::string(40, 'b')) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_FALSE((*a)->IsLive(std::string(40, 'b')));
  EXPECT_EQ((*a)->All().size(), 2u);
  EXPECT_EQ((*a)->malformed(), 0u);
}

}  // namespace
}  // namespace tally::cluster
