#include "programs/node.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/test_dir.h"

namespace tally::programs {
namespace {

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDirectory("tally_node_test_");
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    options_.data_dir = (dir_ / "data").string();
    options_.redis.port = 0;
    options_.redis.workers = 1;
    options_.http.port = 0;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  NodeOptions options_;
};

TEST_F(NodeTest, StartsServesAndStops) {
  const std::string script = (dir_ / "counters.sql").string();
  std::ofstream(script) << "CREATE SOURCE posts (id bigint, blog_id bigint);\n"
                           "CREATE COUNTER blog_posts AS SELECT blog_id, count(*) FROM posts "
                           "GROUP BY blog_id;\n";
  options_.definitions_file = script;
  Node node(options_);
  auto status = node.Start();
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_NE(node.redis_port(), 0);
  EXPECT_NE(node.http_port(), 0);
  EXPECT_EQ(node.data_dir(), std::filesystem::absolute(dir_ / "data").string());
  EXPECT_TRUE(std::filesystem::exists(dir_ / "data"));
  node.Stop();
  node.Stop();  // a second stop does nothing
}

TEST_F(NodeTest, AFailedStartSaysWhyAndStopsWhatStarted) {
  options_.http.bind = "not an address";
  {
    Node node(options_);
    auto status = node.Start();
    ASSERT_FALSE(status);
    EXPECT_EQ(status.error().message, "bad bind address 'not an address' for HTTP");
    EXPECT_EQ(node.http_port(), 0);
  }
  // The engine and the Redis server had started: they stopped, and the store closed with the
  // node, so another node starts on it.
  options_.http.bind = "127.0.0.1";
  Node fixed(options_);
  auto status = fixed.Start();
  EXPECT_TRUE(status) << status.error().message;
}

TEST_F(NodeTest, BadDefinitionsNameTheFile) {
  const std::string script = (dir_ / "bad.sql").string();
  std::ofstream(script) << "CREATE COUNTER nope AS SELECT count(*) FROM nowhere;\n";
  options_.definitions_file = script;
  Node node(options_);
  auto status = node.Start();
  ASSERT_FALSE(status);
  EXPECT_TRUE(status.error().message.starts_with(script + ": ")) << status.error().message;
}

TEST_F(NodeTest, ABadAclfileStopsTheStartBeforeTheStoreOpens) {
  const std::string file = (dir_ / "users.acl").string();
  options_.redis.aclfile = file;
  {
    Node node(options_);  // a missing aclfile is fine: ACL SAVE writes it
    auto status = node.Start();
    ASSERT_TRUE(status) << status.error().message;
  }
  std::filesystem::remove_all(dir_ / "data");
  std::ofstream(file) << "user alice on >pw ~* +@all\nuser bob on +@nope\n";
  Node node(options_);
  auto status = node.Start();
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().message,
            "--aclfile: " + file +
                ":2: Error in ACL SETUSER modifier '+@nope': Unknown command or category name "
                "in ACL");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "data"));
}

}  // namespace
}  // namespace tally::programs
