// The Redis session's state machine without sockets: requests in as argument lists, replies
// out as RESP bytes, against a real Engine and DerivedCounters over a store in a temporary
// directory. A "turn" here is what a worker's is: requests run, then the shard folds.
#include "servers/redis/session.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/derived/derived_test_util.h"
#include "engine/subscriptions.h"
#include "servers/redis/worker_shard.h"

namespace tally::redis {
namespace {

using Request = std::vector<std::string_view>;

constexpr int64_t kNowMs = 1'700'000'000'000;

// The subscription hub's deliveries go nowhere: these tests look at the replies.
class NullSink : public engine::SubscriberSink {
 public:
  void Deliver(engine::SubscriptionDelivery delivery) override {}
  void Disconnect(std::string reason) override {}
};

class SessionTest : public derived::DerivedStoreTest {
 protected:
  SessionTest() : DerivedStoreTest("tally_session_test_", kNowMs, derived::DerivedOptions{}) {}

  void SetUp() override {
    DerivedStoreTest::SetUp();
    hub_ = std::make_unique<engine::SubscriptionHub>(&engine_->keyspace(),
                                                     engine::SubscriptionOptions{});
    Serve(ServerOptions{});
  }
  void TearDown() override {
    session_.reset();
    shard_.reset();
    core_.reset();
    hub_.reset();
    DerivedStoreTest::TearDown();
  }

  // A server core with `options` and one session on it (the previous one goes).
  void Serve(ServerOptions options) {
    session_.reset();
    shard_.reset();
    servers::Services services(*engine_);
    services.derived = derived_.get();
    services.subscriptions = hub_.get();
    core_ = std::make_unique<ServerCore>(std::move(services), std::move(options));
    shard_ = std::make_unique<WorkerShard>(&engine_->keyspace());
    core_->AddWorkerStats(&shard_->stats());
    auto info = core_->clients().Add("127.0.0.1:50000", "127.0.0.1:6380", -1, kNowMs);
    session_ = std::make_unique<Session>(*core_, *shard_, std::move(info));
    session_->set_sink_factory([] { return std::make_shared<NullSink>(); });
  }

  // Runs the requests in one turn and returns their replies.
  std::string Turn(const std::vector<Request>& requests) {
    for (const Request& request : requests) session_->Execute(request);
    shard_->FoldIncrements();
    EXPECT_FALSE(session_->has_holes());
    std::string replies;
    replies.swap(session_->output());
    return replies;
  }
  std::string Call(const Request& request) { return Turn({request}); }

  std::unique_ptr<engine::SubscriptionHub> hub_;
  std::unique_ptr<ServerCore> core_;
  std::unique_ptr<WorkerShard> shard_;
  std::unique_ptr<Session> session_;
};

std::string WrongArity(std::string_view command) {
  return fmt::format("-ERR wrong number of arguments for '{}' command\r\n", command);
}

TEST_F(SessionTest, CountersAnswerAsRedisDoes) {
  EXPECT_EQ(Call({"GET", "likes"}), "$-1\r\n");
  EXPECT_EQ(Call({"INCR", "likes"}), ":1\r\n");
  EXPECT_EQ(Call({"incrby", "likes", "41"}), ":42\r\n");
  EXPECT_EQ(Call({"DECR", "likes"}), ":41\r\n");
  EXPECT_EQ(Call({"DECRBY", "likes", "50"}), ":-9\r\n");
  EXPECT_EQ(Call({"GET", "likes"}), "$2\r\n-9\r\n");
  EXPECT_EQ(Call({"SET", "views", "7"}), "+OK\r\n");
  EXPECT_EQ(Call({"MGET", "likes", "views", "none"}), "*3\r\n$2\r\n-9\r\n$1\r\n7\r\n$-1\r\n");
  EXPECT_EQ(Call({"EXISTS", "likes", "none"}), ":1\r\n");
  EXPECT_EQ(Call({"DEL", "likes", "none"}), ":1\r\n");
  EXPECT_EQ(Call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(Call({"ECHO", "hi"}), "$2\r\nhi\r\n");
}

TEST_F(SessionTest, IncrementsOfATurnAreFilledInOrderAndSeenByLaterReads) {
  // The increments wait in the shard; GET of the same key folds them first, and the turn's
  // end folds the rest: every reply lands where its request was.
  EXPECT_EQ(Turn({{"INCR", "a"},
                  {"INCR", "a"},
                  {"GET", "a"},
                  {"INCRBY", "b", "5"},
                  {"INCRBY", "a", "x"},
                  {"INCR", "a"}}),
            ":1\r\n:2\r\n$1\r\n2\r\n:5\r\n-ERR value is not an integer or out of range\r\n"
            ":3\r\n");
  EXPECT_EQ(shard_->stats().folds.load(), 2u);
  EXPECT_EQ(shard_->stats().increments_folded.load(), 4u);
}

TEST_F(SessionTest, EachDatabaseKeepsItsKeysUnderItsPrefix) {
  EXPECT_EQ(Turn({{"INCR", "a"}, {"SELECT", "2"}, {"INCRBY", "a", "5"}, {"SET", "b", "7"}}),
            ":1\r\n+OK\r\n:5\r\n+OK\r\n");
  // Database 2's keys are stored under "\0db\x02"; database 0's as they are.
  const std::string a2 = engine::StoredKey(2, "a");
  const engine::HashedKey stored(a2);
  EXPECT_EQ(engine_->keyspace().Lock(stored).Get(stored), 5);
  EXPECT_EQ(Call({"KEYS", "a*"}), "*1\r\n$1\r\na\r\n");
  EXPECT_EQ(Call({"DBSIZE"}), ":2\r\n");
  EXPECT_EQ(Turn({{"SELECT", "0"}, {"GET", "a"}, {"GET", "b"}, {"DBSIZE"}}),
            "+OK\r\n$1\r\n1\r\n$-1\r\n:1\r\n");
  EXPECT_EQ(Call({"SELECT", "16"}), "-ERR DB index is out of range\r\n");
  EXPECT_EQ(Call({"GET", std::string_view("\0db\x02a", 5)}),
            "-ERR keys that start with \\x00db are reserved: tally stores the keys of databases "
            "1 and up under them\r\n");
}

TEST_F(SessionTest, AnIncrementPastInt64ChangesNothing) {
  EXPECT_EQ(Call({"SET", "a", "9223372036854775807"}), "+OK\r\n");
  EXPECT_EQ(Call({"INCR", "a"}), "-ERR increment or decrement would overflow\r\n");
  EXPECT_EQ(Call({"GET", "a"}), "$19\r\n9223372036854775807\r\n");
}

TEST_F(SessionTest, RepliesWaitForTheirCommitEpoch) {
  EXPECT_EQ(session_->required_epoch(), 0u);
  EXPECT_EQ(Call({"INCR", "a"}), ":1\r\n");
  const uint64_t epoch = session_->required_epoch();
  EXPECT_GT(epoch, 0u);
  engine_->committer().TryCommitNow();
  engine_->committer().WaitDurable(epoch);
  EXPECT_TRUE(engine_->IsDurable(epoch));
  // A read of what is already durable asks for nothing newer.
  EXPECT_EQ(Call({"GET", "a"}), "$1\r\n1\r\n");
  EXPECT_EQ(session_->required_epoch(), epoch);
}

TEST_F(SessionTest, UnknownCommandsAndWrongArity) {
  EXPECT_EQ(Call({"FOO", "a", "b"}),
            "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n");
  EXPECT_EQ(Call({"GET"}), WrongArity("get"));
  EXPECT_EQ(Call({"GET", "a", "b"}), WrongArity("get"));
  EXPECT_EQ(Call({"INCR"}), WrongArity("incr"));
  EXPECT_EQ(Call({"incrby", "a"}), WrongArity("incrby"));
  EXPECT_EQ(Call({"MGET"}), WrongArity("mget"));
  // Nothing was counted.
  EXPECT_EQ(Call({"DBSIZE"}), ":0\r\n");
  EXPECT_EQ(shard_->stats().errors.Snapshot(),
            (std::vector<std::pair<std::string, uint64_t>>{{"ERR", 6}}));
}

// The session reuses the spec of the command it ran last when the name is the same in any
// case; any other name, of any length, is looked up.
TEST_F(SessionTest, EachRequestRunsTheCommandItNames) {
  EXPECT_EQ(Call({"INCR", "a"}), ":1\r\n");
  EXPECT_EQ(Call({"iNcR", "a"}), ":2\r\n");
  EXPECT_EQ(Call({"DECR", "a"}), ":1\r\n");
  EXPECT_EQ(Call({"INCRX", "a"}),
            "-ERR unknown command 'INCRX', with args beginning with: 'a' \r\n");
  EXPECT_EQ(Call({"INC", "a"}), "-ERR unknown command 'INC', with args beginning with: 'a' \r\n");
  EXPECT_EQ(Call({"incr", "a"}), ":2\r\n");
  EXPECT_EQ(Call({"INCR", "a", "b"}), WrongArity("incr"));
  EXPECT_EQ(Call({"GET", "a"}), "$1\r\n2\r\n");
  EXPECT_EQ(Call({"GET\xc5", "a"}).substr(0, 20), "-ERR unknown command");
}

// INFO's section names are folded like command names (ASCII, any case).
TEST_F(SessionTest, InfoSectionsAreNamedInAnyCase) {
  const std::string reply = Call({"INFO", "PerSistence"});
  EXPECT_NE(reply.find("# Persistence"), std::string::npos) << reply;
  EXPECT_EQ(reply.find("# Server"), std::string::npos) << reply;
}

TEST_F(SessionTest, AProtocolErrorIsAnsweredAndCloses) {
  session_->ProtocolError("Protocol error: invalid multibulk length");
  EXPECT_EQ(session_->output(), "-ERR Protocol error: invalid multibulk length\r\n");
  EXPECT_TRUE(session_->close_requested());
}

TEST_F(SessionTest, QuitAnswersOkThenCloses) {
  EXPECT_EQ(Call({"QUIT"}), "+OK\r\n");
  EXPECT_TRUE(session_->close_requested());
}

TEST_F(SessionTest, MultiQueuesAndExecRunsTogether) {
  EXPECT_EQ(Call({"MULTI"}), "+OK\r\n");
  EXPECT_TRUE(session_->in_multi());
  EXPECT_EQ(Call({"INCR", "a"}), "+QUEUED\r\n");
  EXPECT_EQ(Call({"INCRBY", "a", "5"}), "+QUEUED\r\n");
  EXPECT_EQ(Call({"GET", "a"}), "+QUEUED\r\n");
  EXPECT_EQ(Call({"MULTI"}), "-ERR MULTI calls can not be nested\r\n");
  EXPECT_EQ(Call({"EXEC"}), "*3\r\n:1\r\n:6\r\n$1\r\n6\r\n");
  EXPECT_FALSE(session_->in_multi());
  EXPECT_EQ(Call({"GET", "a"}), "$1\r\n6\r\n");
}

TEST_F(SessionTest, DiscardDropsTheQueue) {
  EXPECT_EQ(Call({"DISCARD"}), "-ERR DISCARD without MULTI\r\n");
  EXPECT_EQ(Call({"EXEC"}), "-ERR EXEC without MULTI\r\n");
  EXPECT_EQ(Turn({{"MULTI"}, {"INCR", "a"}, {"DISCARD"}}), "+OK\r\n+QUEUED\r\n+OK\r\n");
  EXPECT_FALSE(session_->in_multi());
  EXPECT_EQ(Call({"GET", "a"}), "$-1\r\n");
}

TEST_F(SessionTest, AnErrorWhileQueueingAbortsTheTransaction) {
  EXPECT_EQ(Turn({{"MULTI"}, {"INCR", "a"}, {"NOPE"}, {"INCR"}, {"EXEC"}}),
            fmt::format("+OK\r\n+QUEUED\r\n"
                        "-ERR unknown command 'NOPE', with args beginning with: \r\n{}"
                        "-EXECABORT Transaction discarded because of previous errors.\r\n",
                        WrongArity("incr")));
  EXPECT_FALSE(session_->in_multi());
  EXPECT_EQ(Call({"GET", "a"}), "$-1\r\n");
  // A command that cannot be queued dooms the transaction too.
  EXPECT_EQ(Turn({{"MULTI"}, {"SUBSCRIBE", "a"}, {"EXEC"}}),
            "+OK\r\n-ERR Command not allowed inside a transaction\r\n"
            "-EXECABORT Transaction discarded because of previous errors.\r\n");
  // A refused EXEC ends the transaction, answered EXECABORT with the reason.
  EXPECT_EQ(Turn({{"MULTI"}, {"INCR", "a"}, {"EXEC", "now"}}),
            "+OK\r\n+QUEUED\r\n-EXECABORT Transaction discarded because of: wrong number of "
            "arguments for 'exec' command\r\n");
  EXPECT_FALSE(session_->in_multi());
  EXPECT_EQ(Call({"GET", "a"}), "$-1\r\n");
}

TEST_F(SessionTest, WithAPasswordEveryCommandButAFewNeedsAuth) {
  ServerOptions options;
  options.requirepass = "s3cret";
  Serve(options);
  EXPECT_FALSE(session_->authenticated());
  const std::string noauth = "-NOAUTH Authentication required.\r\n";
  EXPECT_EQ(Call({"GET", "a"}), noauth);
  EXPECT_EQ(Call({"INCR", "a"}), noauth);
  EXPECT_EQ(Call({"PING"}), noauth);
  EXPECT_EQ(Call({"AUTH", "wrong"}),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  EXPECT_EQ(Call({"AUTH", "someone", "s3cret"}),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  EXPECT_FALSE(session_->authenticated());
  EXPECT_EQ(Call({"AUTH", "s3cret"}), "+OK\r\n");
  EXPECT_TRUE(session_->authenticated());
  EXPECT_EQ(Call({"INCR", "a"}), ":1\r\n");
  // RESET forgets the authentication.
  EXPECT_EQ(Call({"RESET"}), "+RESET\r\n");
  EXPECT_EQ(Call({"GET", "a"}), noauth);
  EXPECT_EQ(Call({"AUTH", "default", "s3cret"}), "+OK\r\n");
  EXPECT_EQ(Call({"GET", "a"}), "$1\r\n1\r\n");
}

TEST_F(SessionTest, HelloAuthenticatesAndSwitchesTheProtocol) {
  ServerOptions options;
  options.requirepass = "s3cret";
  Serve(options);
  EXPECT_TRUE(Call({"HELLO", "3"})
                  .starts_with("-NOAUTH HELLO must be called with the client "
                               "already authenticated"));
  EXPECT_EQ(session_->protocol(), 2);
  EXPECT_EQ(Call({"HELLO", "3", "AUTH", "default", "nope"}),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  const std::string hello = Call({"HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "app"});
  EXPECT_TRUE(hello.starts_with("%7\r\n$6\r\nserver\r\n$5\r\ntally\r\n")) << hello;
  EXPECT_TRUE(session_->authenticated());
  EXPECT_EQ(session_->protocol(), 3);
  EXPECT_EQ(session_->info().name, "app");
  EXPECT_EQ(Call({"GET", "a"}), "_\r\n");  // RESP3's null
}

TEST_F(SessionTest, HelloChoosesTwoOrThree) {
  EXPECT_TRUE(Call({"HELLO"}).starts_with("*14\r\n$6\r\nserver\r\n$5\r\ntally\r\n"));
  EXPECT_EQ(session_->protocol(), 2);
  EXPECT_TRUE(Call({"HELLO", "3"}).starts_with("%7\r\n"));
  EXPECT_EQ(session_->protocol(), 3);
  EXPECT_EQ(Call({"HELLO", "4"}), "-NOPROTO unsupported protocol version\r\n");
  EXPECT_EQ(Call({"HELLO", "x"}), "-ERR Protocol version is not an integer or out of range\r\n");
  EXPECT_EQ(session_->protocol(), 3);
  EXPECT_TRUE(Call({"HELLO", "2"}).starts_with("*14\r\n"));
  EXPECT_EQ(session_->protocol(), 2);
  EXPECT_EQ(Call({"GET", "a"}), "$-1\r\n");
  // Without a password, AUTH is an error that says so.
  EXPECT_EQ(Call({"AUTH", "x"}),
            "-ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?\r\n");
}

TEST_F(SessionTest, Resp2SubscribedModeTakesOnlyPubSubCommands) {
  EXPECT_EQ(Call({"SUBSCRIBE", "likes:1", "likes:2"}),
            "*3\r\n$9\r\nsubscribe\r\n$7\r\nlikes:1\r\n:1\r\n"
            "*3\r\n$9\r\nsubscribe\r\n$7\r\nlikes:2\r\n:2\r\n");
  EXPECT_EQ(session_->subscription_count(), 2u);
  EXPECT_EQ(hub_->subscriber_count(), 1u);
  EXPECT_EQ(Call({"GET", "likes:1"}),
            "-ERR Can't execute 'get': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT / RESET "
            "are allowed in this context\r\n");
  EXPECT_EQ(Call({"INCR", "likes:1"}),
            "-ERR Can't execute 'incr': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT / "
            "RESET are allowed in this context\r\n");
  EXPECT_EQ(Call({"PING"}), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
  EXPECT_EQ(Call({"PSUBSCRIBE", "likes:*"}), "*3\r\n$10\r\npsubscribe\r\n$7\r\nlikes:*\r\n:3\r\n");
  EXPECT_EQ(Call({"PSUBSCRIBE", "li?es*"}),
            "-ERR tally supports only key-prefix patterns, <prefix>* (a literal prefix, then "
            "one '*'), got 'li?es*'\r\n");
  EXPECT_EQ(Call({"UNSUBSCRIBE", "likes:1"}),
            "*3\r\n$11\r\nunsubscribe\r\n$7\r\nlikes:1\r\n:2\r\n");
  EXPECT_EQ(Call({"UNSUBSCRIBE"}), "*3\r\n$11\r\nunsubscribe\r\n$7\r\nlikes:2\r\n:1\r\n");
  EXPECT_EQ(Call({"PUNSUBSCRIBE", "likes:*"}),
            "*3\r\n$12\r\npunsubscribe\r\n$7\r\nlikes:*\r\n:0\r\n");
  // Following nothing: every command again, and the hub forgot the subscriber.
  EXPECT_EQ(hub_->subscriber_count(), 0u);
  EXPECT_EQ(Call({"INCR", "likes:1"}), ":1\r\n");
}

TEST_F(SessionTest, Resp3SubscribedModeTakesEveryCommand) {
  EXPECT_TRUE(Call({"HELLO", "3"}).starts_with("%7\r\n"));
  EXPECT_EQ(Call({"SUBSCRIBE", "likes:1"}), ">3\r\n$9\r\nsubscribe\r\n$7\r\nlikes:1\r\n:1\r\n");
  EXPECT_EQ(Call({"INCR", "likes:1"}), ":1\r\n");
  EXPECT_EQ(Call({"PING"}), "+PONG\r\n");
  // RESET leaves subscribed mode and RESP3.
  EXPECT_EQ(Call({"RESET"}), "+RESET\r\n");
  EXPECT_EQ(session_->subscription_count(), 0u);
  EXPECT_EQ(session_->protocol(), 2);
  EXPECT_EQ(hub_->subscriber_count(), 0u);
}

TEST_F(SessionTest, WithoutAHubSubscribeIsRefused) {
  hub_.reset();
  Serve(ServerOptions{});
  EXPECT_EQ(Call({"SUBSCRIBE", "a"}), "-ERR live subscriptions are not enabled on this server\r\n");
  EXPECT_EQ(session_->subscription_count(), 0u);
  EXPECT_EQ(Call({"GET", "a"}), "$-1\r\n");
}

TEST_F(SessionTest, DerivedCountersAreReadOnlyToPlainCommands) {
  Define(
      "CREATE SOURCE posts (id bigint, blog_id bigint);"
      "CREATE COUNTER blog_posts AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id;");
  EXPECT_EQ(Call({"COUNTER.PUSH", R"({"source":"posts","new":{"id":1,"blog_id":7}})"}),
            "*4\r\n:1\r\n:1\r\n:0\r\n:1\r\n");
  EXPECT_EQ(Call({"GET", "blog_posts:7"}), "$1\r\n1\r\n");
  const std::string refused = Call({"INCR", "blog_posts:7"});
  EXPECT_TRUE(refused.starts_with("-ERR ")) << refused;
  EXPECT_NE(refused.find("blog_posts"), std::string::npos) << refused;
  EXPECT_EQ(Call({"GET", "blog_posts:7"}), "$1\r\n1\r\n");
}

TEST_F(SessionTest, CounterRepairStateSetsWholeGroupsWithTheirRecords) {
  Define(
      "CREATE SOURCE orders (id bigint, shop bigint, customer bigint);"
      "CREATE COUNTER buyers AS SELECT shop, count(DISTINCT customer) FROM orders GROUP BY shop;"
      "CREATE COUNTER shops AS SELECT shop, count(*) FROM orders GROUP BY shop;");
  const auto push = [&](std::string_view side, int id, int shop, int customer) {
    return Call({"COUNTER.PUSH", fmt::format(R"({{"source":"orders","{}":{{"id":{},"shop":{},)"
                                             R"("customer":{}}}}})",
                                             side, id, shop, customer)});
  };
  push("new", 1, 7, 1);
  push("new", 2, 7, 2);
  push("new", 3, 9, 2);
  EXPECT_EQ(Call({"COUNTER.GET", "buyers", "7"}), ":2\r\n");
  // Shop 7 has 3 rows of customer 5 (the value bytes of an int64: 8 bytes, big-endian, the
  // sign bit flipped), shop 9 none.
  const std::string five("0v\x80\0\0\0\0\0\0\x05", 10);
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "buyers", "buyers:7", "1", "1", five, "3", "buyers:9", "0",
                  "0"}),
            ":2\r\n");
  EXPECT_EQ(Call({"COUNTER.GET", "buyers", "7"}), ":1\r\n");
  EXPECT_EQ(Call({"COUNTER.GET", "buyers", "9"}), ":0\r\n");
  EXPECT_EQ(Call({"COUNTER.SCAN", "buyers", "0", "10"}),
            "*2\r\n$1\r\n0\r\n*2\r\n$8\r\nbuyers:7\r\n:1\r\n");
  // The formula goes on from there: customer 5 keeps rows after one goes; customer 1 was
  // dropped by the repair, so its row counts anew.
  push("old", 4, 7, 5);
  push("new", 5, 7, 1);
  EXPECT_EQ(Call({"COUNTER.GET", "buyers", "7"}), ":2\r\n");

  // Errors change nothing.
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "buyers", "buyers:7", "1", "2", five, "3"}),
            "-ERR group buyers:7 announces 2 records; 2 arguments follow it\r\n");
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "buyers", "buyers:7", "1", "1", five}),
            "-ERR group buyers:7 announces 1 records; 1 arguments follow it\r\n");
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "buyers", "buyers:7", "one", "0"}),
            "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "buyers", "buyers:7", "1", "1", "0v\x80", "3"}),
            "-ERR counter buyers, group buyers:7: aggregate 0 of counter buyers (count(DISTINCT "
            "customer)): the value bytes of its int64 argument are 8 bytes, not these 1\r\n");
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "shops", "shops:7", "1", "0"}),
            "-ERR counter shops keeps one number per group, no records: COUNTER.REPAIR sets its "
            "groups\r\n");
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "none", "none:7", "1", "0"}),
            "-ERR counter none does not exist\r\n");
  EXPECT_EQ(Call({"COUNTER.REPAIRSTATE", "buyers", "buyers:7", "1"}),
            WrongArity("counter.repairstate"));
  EXPECT_EQ(Call({"COUNTER.GET", "buyers", "7"}), ":2\r\n");
}

TEST_F(SessionTest, AUserRunsOnlyWhatItsRulesAllow) {
  Define(
      "CREATE SOURCE posts (id bigint, blog_id bigint);"
      "CREATE COUNTER blog_posts AS SELECT blog_id, count(*) FROM posts GROUP BY blog_id;");
  EXPECT_EQ(Call({"ACL", "SETUSER", "alice", "on", ">pw", "~likes:*", "%R~blog_posts:7", "+@read",
                  "+incr", "+@connection"}),
            "+OK\r\n");
  EXPECT_EQ(Call({"AUTH", "alice", "pw"}), "+OK\r\n");
  EXPECT_EQ(Call({"ACL", "WHOAMI"}), "$5\r\nalice\r\n");
  const std::string key = "-NOPERM No permissions to access a key\r\n";
  EXPECT_EQ(Turn({{"INCR", "likes:1"}, {"INCR", "posts:1"}, {"GET", "posts:1"}}),
            ":1\r\n" + key + key);
  EXPECT_EQ(Call({"INCR", "blog_posts:7"}), key);  // read-only to alice
  EXPECT_EQ(Call({"DEL", "likes:1"}),
            "-NOPERM User alice has no permissions to run the 'del' command\r\n");
  // The derived counters' reads check the keys they read.
  EXPECT_EQ(Call({"COUNTER.GET", "blog_posts", "7"}), ":0\r\n");
  EXPECT_EQ(Call({"COUNTER.GET", "blog_posts", "8"}), key);
  EXPECT_EQ(Call({"COUNTER.TOP", "blog_posts", "3"}), key);
  // Whole-keyspace commands need every key.
  EXPECT_EQ(Call({"DBSIZE"}), key);
  // In another database the patterns match the key's name.
  EXPECT_EQ(Turn({{"SELECT", "1"}, {"INCR", "likes:1"}, {"INCR", "posts:1"}}),
            "+OK\r\n:1\r\n" + key);
  // A changed user applies to its sessions at once.
  EXPECT_EQ(Call({"ACL", "SETUSER", "alice", "-incr"}),
            "-NOPERM User alice has no permissions to run the 'acl' command\r\n");
  ASSERT_TRUE(core_->acl().SetUser("alice", std::vector<std::string>{"-incr"}));
  EXPECT_EQ(Call({"INCR", "likes:1"}),
            "-NOPERM User alice has no permissions to run the 'incr' command\r\n");
  ASSERT_TRUE(core_->acl().SetUser("alice", std::vector<std::string>{"off"}));
  EXPECT_EQ(Call({"GET", "likes:1"}), "-NOAUTH Authentication required.\r\n");
  // Each refusal was logged, the newest first.
  const auto log = core_->acl().LogEntries(1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].object, "incr");
  EXPECT_EQ(log[0].username, "alice");
}

}  // namespace
}  // namespace tally::redis
