// The ACL model: rules as Redis reads them, permissions, passwords, the aclfile, the log and
// the limit on failed passwords.
#include "servers/auth/acl.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace tally::auth {
namespace {

std::vector<CommandInfo> Commands() {
  return {{"get", kRead | kString | kFast}, {"incr", kWrite | kString | kFast},
          {"del", kWrite | kKeyspace},      {"flushall", kWrite | kKeyspace | kDangerous},
          {"subscribe", kPubSub},           {"counter.define", kWrite | kAdmin | kDefinitions},
          {"counter.push", kWrite | kPush}};
}

TEST(AclTest, TheDefaultUserIsOpenOrHasTheRequirepassPassword) {
  Acl open(Commands(), "");
  ASSERT_NE(open.OpenDefault(), nullptr);
  EXPECT_TRUE(open.OpenDefault()->unrestricted());
  EXPECT_EQ(open.Find("default")->Describe(), "user default on nopass ~* resetchannels +@all");

  Acl closed(Commands(), "s3cret");
  EXPECT_EQ(closed.OpenDefault(), nullptr);
  EXPECT_EQ(closed.Authenticate("default", "nope"), nullptr);
  ASSERT_NE(closed.Authenticate("default", "s3cret"), nullptr);
  EXPECT_EQ(closed.Find("default")->password_hashes(),
            std::vector<std::string>{HashPassword("s3cret")});
}

TEST(AclTest, PasswordsAreSha256) {
  // Redis's digest of "foobar" (ACL GETUSER shows the same).
  EXPECT_EQ(HashPassword("foobar"),
            "c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2");
}

TEST(AclTest, CategoriesCommandsAndKeyPatterns) {
  Acl acl(Commands(), "");
  const std::vector<std::string> rules = {"on",     ">pw",   "~likes:*", "%R~posts:*",
                                          "+@read", "+incr", "+@push"};
  ASSERT_TRUE(acl.SetUser("alice", rules));
  auto alice = acl.Authenticate("alice", "pw");
  ASSERT_NE(alice, nullptr);
  EXPECT_FALSE(alice->unrestricted());
  EXPECT_TRUE(alice->CanRun(acl.CommandId("GET")));
  EXPECT_TRUE(alice->CanRun(acl.CommandId("incr")));
  EXPECT_TRUE(alice->CanRun(acl.CommandId("counter.push")));
  EXPECT_FALSE(alice->CanRun(acl.CommandId("del")));
  EXPECT_FALSE(alice->CanRun(acl.CommandId("counter.define")));
  EXPECT_TRUE(alice->CanAccess("likes:1", kReadKey | kWriteKey));
  EXPECT_TRUE(alice->CanAccess("posts:1", kReadKey));
  EXPECT_FALSE(alice->CanAccess("posts:1", kWriteKey));
  EXPECT_FALSE(alice->CanAccess("users:1", kReadKey));
  EXPECT_FALSE(alice->CanAccessAll(kReadKey));
  EXPECT_TRUE(alice->CanReadPrefix("likes:7"));
  EXPECT_FALSE(alice->CanReadPrefix("like"));
  EXPECT_EQ(alice->Describe(), "user alice on #" + HashPassword("pw") +
                                   " ~likes:* %R~posts:* resetchannels -@all +@read +incr "
                                   "+@push");
  // -@all later resets the command rules; removing a password by its value.
  ASSERT_TRUE(acl.SetUser("alice", std::vector<std::string>{"nocommands", "+get", "<pw"}));
  alice = acl.Find("alice");
  EXPECT_EQ(alice->CommandRules(), "-@all +get");
  EXPECT_FALSE(alice->CanRun(acl.CommandId("incr")));
  EXPECT_EQ(acl.Authenticate("alice", "pw"), nullptr);
}

TEST(AclTest, ABadRuleChangesNothing) {
  Acl acl(Commands(), "");
  const uint64_t version = acl.version();
  auto status = acl.SetUser("bob", std::vector<std::string>{"on", "+get", "+@nosuch"});
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().message,
            "Error in ACL SETUSER modifier '+@nosuch': Unknown command or category name in ACL");
  EXPECT_EQ(acl.Find("bob"), nullptr);
  EXPECT_EQ(acl.version(), version);
  EXPECT_EQ(acl.SetUser("bob", std::vector<std::string>{"%X~a"}).error().message,
            "Error in ACL SETUSER modifier '%X~a': Syntax error");
  EXPECT_EQ(acl.DeleteUser("default").error().message, "The 'default' user cannot be removed");
  EXPECT_FALSE(*acl.DeleteUser("bob"));
}

TEST(AclTest, DisabledUsersCannotAuthenticate) {
  Acl acl(Commands(), "");
  ASSERT_TRUE(acl.SetUser("carol", std::vector<std::string>{"off", ">pw", "+@all", "~*"}));
  EXPECT_EQ(acl.Authenticate("carol", "pw"), nullptr);
  ASSERT_TRUE(acl.SetUser("carol", std::vector<std::string>{"on"}));
  EXPECT_NE(acl.Authenticate("carol", "pw"), nullptr);
  ASSERT_TRUE(acl.SetUser("default", std::vector<std::string>{"off"}));
  EXPECT_EQ(acl.OpenDefault(), nullptr);  // protected mode no longer applies
}

TEST(AclTest, TheFileRoundTripsAndABadLineChangesNothing) {
  // Per process: other test runs may share the temporary directory.
  const auto path = std::filesystem::temp_directory_path() /
                    ("tally-acl-test-" + std::to_string(::getpid()) + ".acl");
  Acl acl(Commands(), "s3cret");
  ASSERT_TRUE(acl.SetUser("alice", std::vector<std::string>{"on", ">pw", "~likes:*", "+@read"}));
  ASSERT_TRUE(acl.Save(path.string()));
  // Password digests only, and for tallyd's user only.
  EXPECT_EQ(std::filesystem::status(path).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::ifstream saved(path);
  const std::string text((std::istreambuf_iterator<char>(saved)), {});
  EXPECT_EQ(text, "user alice on #" + HashPassword("pw") +
                      " ~likes:* resetchannels -@all +@read\n" + "user default on #" +
                      HashPassword("s3cret") + " ~* resetchannels +@all\n");

  Acl loaded(Commands(), "");
  ASSERT_TRUE(loaded.Load(path.string()));
  EXPECT_NE(loaded.Authenticate("alice", "pw"), nullptr);
  EXPECT_NE(loaded.Authenticate("default", "s3cret"), nullptr);
  EXPECT_EQ(loaded.Find("alice")->Describe(), acl.Find("alice")->Describe());

  std::ofstream(path, std::ios::app) << "user mallory on >x +@nope\n";
  auto status = loaded.Load(path.string());
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().message,
            path.string() +
                ":3: Error in ACL SETUSER modifier '+@nope': Unknown command or category name "
                "in ACL");
  EXPECT_EQ(loaded.Find("mallory"), nullptr);
  std::filesystem::remove(path);
}

TEST(AclTest, TheLogCountsRepeatsAndKeepsTheNewestFirst) {
  Acl acl(Commands(), "");
  auto entry = [](std::string reason, std::string object, std::string username) {
    return AclLogEntry{.reason = std::move(reason),
                       .context = "toplevel",
                       .object = std::move(object),
                       .username = std::move(username),
                       .client = "id=1"};
  };
  acl.Log(entry("auth", "AUTH", "x"), 1000);
  acl.Log(entry("command", "del", "a"), 2000);
  acl.Log(entry("auth", "AUTH", "x"), 3000);  // a repeat of the first
  auto entries = acl.LogEntries(10);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].reason, "auth");
  EXPECT_EQ(entries[0].count, 2);
  EXPECT_EQ(entries[0].created_ms, 1000);
  EXPECT_EQ(entries[0].updated_ms, 3000);
  EXPECT_EQ(entries[1].object, "del");
  // A minute later the same refusal is a new entry.
  acl.Log({.reason = "command",
           .context = "toplevel",
           .object = "del",
           .username = "a",
           .client = "id=1"},
          70000);
  EXPECT_EQ(acl.LogEntries(10).size(), 3u);
  acl.ResetLog();
  EXPECT_TRUE(acl.LogEntries(10).empty());
}

TEST(AclTest, FailedPasswordsAreLimitedPerAddressAndMinute) {
  Acl acl(Commands(), "s3cret");
  acl.set_max_auth_failures(3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(acl.AuthBlocked("10.0.0.1", 1000 + i));
    acl.AuthFailed("10.0.0.1", 1000 + i);
  }
  EXPECT_TRUE(acl.AuthBlocked("10.0.0.1", 2000));
  EXPECT_FALSE(acl.AuthBlocked("10.0.0.2", 2000));   // another address
  EXPECT_FALSE(acl.AuthBlocked("10.0.0.1", 61000));  // the minute is over
}

}  // namespace
}  // namespace tally::auth
