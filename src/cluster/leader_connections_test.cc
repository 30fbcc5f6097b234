// LeaderConnections against three real nats-servers: each server named by its INFO line,
// the connection handed out for a stream's leader really on that server, and no longer
// handed out once its server is gone.
#include "cluster/leader_connections.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "cluster/partition_test_support.h"

namespace tally::cluster {
namespace {

using namespace std::chrono_literals;

TEST(ParseNatsUrlTest, KeepsHostAndPortOnly) {
  const auto parsed = [](std::string_view url) {
    const NatsUrlAddress address = ParseNatsUrl(url);
    return std::string(address.host) + "|" + std::string(address.port);
  };
  EXPECT_EQ(parsed("nats://127.0.0.1:4222"), "127.0.0.1|4222");
  EXPECT_EQ(parsed("tls://user:secret@nats.example:4443"), "nats.example|4443");
  EXPECT_EQ(parsed("127.0.0.1:4222"), "127.0.0.1|4222");
  EXPECT_EQ(parsed("nats://[::1]:4222/"), "::1|4222");
  EXPECT_EQ(parsed("nats://nats.example"), "nats.example|");
  EXPECT_EQ(parsed("[::1]"), "::1|");
}

// Three servers and the stream TALLY_P0 (PartitionStreamTest's).
class LeaderConnectionsTest : public PartitionStreamTest {
 protected:
  // The stream's leader as JetStream reports it (waits up to 10 s for one).
  std::string Leader() {
    for (int i = 0; i < 100; ++i) {
      auto state = connection_->GetStreamState(kStream);
      if (state && !state->leader.empty() && !state->leaderless) return state->leader;
      std::this_thread::sleep_for(100ms);
    }
    return {};
  }

  ConnectOptions ConnectToAll() const {
    ConnectOptions options;
    options.servers = cluster_->urls();
    return options;
  }
};

TEST_F(LeaderConnectionsTest, ReadsEachServersName) {
  for (int i = 0; i < cluster_->size(); ++i) {
    auto name = ReadServerName(cluster_->url(i), 1000ms);
    ASSERT_TRUE(name) << name.error().message;
    EXPECT_EQ(*name, cluster_->name(i));
  }
  cluster_->Kill(2);
  auto gone = ReadServerName(cluster_->url(2), 1000ms);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::kUnavailable);
}

TEST_F(LeaderConnectionsTest, HandsOutTheConnectionOnTheLeaderWhileItIsThere) {
  const auto leaders = LeaderConnections::Open(ConnectToAll());
  EXPECT_EQ(leaders->names(), (std::vector<std::string>{"n1", "n2", "n3"}));
  const std::string leader = Leader();
  ASSERT_FALSE(leader.empty());
  const int index = cluster_->IndexOf(leader);
  ASSERT_GE(index, 0);

  NatsConnection* on_leader = leaders->On(leader);
  ASSERT_NE(on_leader, nullptr);
  const std::string connected_url = on_leader->connected_url();  // the views below point in
  const std::string configured_url = cluster_->url(index);
  const NatsUrlAddress connected = ParseNatsUrl(connected_url);
  const NatsUrlAddress configured = ParseNatsUrl(configured_url);
  EXPECT_EQ(connected.host, configured.host);
  EXPECT_EQ(connected.port, configured.port);
  // It publishes like any connection.
  Publication publication;
  publication.subject = kSubject;
  publication.data = "x";
  publication.expected_last_seq = 0;
  auto stored = on_leader->Publish(publication, 5000);
  ASSERT_TRUE(stored) << stored.error().message;
  EXPECT_EQ(stored->seq, 1u);
  EXPECT_EQ(leaders->On(""), nullptr);
  EXPECT_EQ(leaders->On("no-such-server"), nullptr);

  // Its server gone, the connection moves to another one and is no longer handed out
  // for that name.
  cluster_->Kill(index);
  bool moved = false;
  for (int i = 0; i < 100 && !moved; ++i) {
    moved = leaders->On(leader) == nullptr;
    if (!moved) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(moved);
}

TEST_F(LeaderConnectionsTest, OneServerNeedsNone) {
  ConnectOptions options;
  options.servers = {cluster_->url(0)};
  const auto leaders = LeaderConnections::Open(options);
  EXPECT_TRUE(leaders->names().empty());
  EXPECT_EQ(leaders->On("n1"), nullptr);
}

}  // namespace
}  // namespace tally::cluster
