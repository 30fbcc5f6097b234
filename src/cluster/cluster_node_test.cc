// NatsConnectOptions: how a node's cluster options become its NATS connection's, TLS above
// all: when it is on, which name the servers' certificates are checked for, and the
// combinations refused before any connection is tried. (Connections over TLS to real
// nats-servers: tests/e2e/test_cluster_tls.py.)
#include "cluster/cluster_node.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tally::cluster {
namespace {

ClusterOptions WithServers(std::vector<std::string> servers) {
  ClusterOptions options;
  options.nats_servers = std::move(servers);
  options.node_name = "n1";
  return options;
}

TEST(NatsConnectOptionsTest, PlainUrlsWithoutTlsOptionsArePlain) {
  auto connect = NatsConnectOptions(WithServers({"nats://127.0.0.1:4222", "127.0.0.1:4223"}));
  ASSERT_TRUE(connect.has_value()) << connect.error().message;
  EXPECT_FALSE(connect->tls.any());
  EXPECT_EQ(connect->servers,
            (std::vector<std::string>{"nats://127.0.0.1:4222", "127.0.0.1:4223"}));
  EXPECT_EQ(connect->name, "tally n1");
  EXPECT_EQ(connect->tls.server_name, "");
}

TEST(NatsConnectOptionsTest, ATlsUrlTurnsTlsOnAndChecksTheHostItNames) {
  auto connect = NatsConnectOptions(
      WithServers({"tls://nats.example:4222", "tls://user:secret@nats.example:4223"}));
  ASSERT_TRUE(connect.has_value()) << connect.error().message;
  EXPECT_TRUE(connect->tls.any());
  EXPECT_EQ(connect->tls.server_name, "nats.example");
  EXPECT_EQ(connect->tls.ca_cert_file, "");
}

TEST(NatsConnectOptionsTest, AnyTlsOptionTurnsTlsOn) {
  ClusterOptions options = WithServers({"nats://[::1]:4222"});
  options.nats_tls.ca_cert_file = "/etc/tally/nats-ca.crt";
  auto connect = NatsConnectOptions(options);
  ASSERT_TRUE(connect.has_value()) << connect.error().message;
  EXPECT_TRUE(connect->tls.any());
  EXPECT_EQ(connect->tls.ca_cert_file, "/etc/tally/nats-ca.crt");
  EXPECT_EQ(connect->tls.server_name, "::1");
}

TEST(NatsConnectOptionsTest, ATlsUrlWithoutAHostIsRefused) {
  auto refused = NatsConnectOptions(WithServers({"tls://:4222"}));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("names no host"), std::string::npos)
      << refused.error().message;
}

TEST(NatsConnectOptionsTest, DifferentHostsNeedAServerName) {
  ClusterOptions options = WithServers({"tls://a.example:4222", "tls://b.example:4222"});
  auto refused = NatsConnectOptions(options);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("--cluster-nats-tls-server-name"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("a.example and b.example"), std::string::npos)
      << refused.error().message;

  options.nats_tls.server_name = "nats.example";
  auto named = NatsConnectOptions(options);
  ASSERT_TRUE(named.has_value()) << named.error().message;
  EXPECT_EQ(named->tls.server_name, "nats.example");
}

TEST(NatsConnectOptionsTest, ACertificateNeedsItsKey) {
  ClusterOptions options = WithServers({"nats://127.0.0.1:4222"});
  options.nats_tls.cert_file = "/etc/tally/node.crt";
  auto refused = NatsConnectOptions(options);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);

  options.nats_tls.cert_file.clear();
  options.nats_tls.key_file = "/etc/tally/node.key";
  EXPECT_FALSE(NatsConnectOptions(options).has_value());

  options.nats_tls.cert_file = "/etc/tally/node.crt";
  auto both = NatsConnectOptions(options);
  ASSERT_TRUE(both.has_value()) << both.error().message;
  EXPECT_TRUE(both->tls.any());
  EXPECT_EQ(both->tls.server_name, "127.0.0.1");
}

}  // namespace
}  // namespace tally::cluster
