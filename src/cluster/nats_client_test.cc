// The NATS client layer and the JetStream behaviour the cluster rests on, against three
// real nats-servers (JetStream clustered, R3 streams) started by each test.
#include "cluster/nats_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/partition_reader.h"
#include "cluster/partition_test_support.h"

namespace tally::cluster {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kWaitMs = 5000;

class NatsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.name = "TEST";
    config_.subjects = {"test.p"};
    StartWithStream(config_, &cluster_, &connection_);
  }

  // A publication on the test stream.
  static Publication Message(std::string_view data, std::string_view id,
                             std::optional<uint64_t> expect) {
    Publication publication;
    publication.subject = "test.p";
    publication.data = data;
    publication.msg_id = id;
    publication.expected_last_seq = expect;
    return publication;
  }

  std::unique_ptr<NatsTestCluster> cluster_;
  std::unique_ptr<NatsConnection> connection_;
  StreamConfig config_;
};

TEST_F(NatsClientTest, EnsureStreamIsIdempotentAndRefusesAnotherConfiguration) {
  auto again = connection_->EnsureStream(config_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->last_seq, 0u);
  EXPECT_FALSE(again->leader.empty());

  StreamConfig other = config_;
  other.max_message_bytes = 4096;
  auto refused = connection_->EnsureStream(other);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().js_code, JSStreamNameExistErr);
  EXPECT_EQ(refused.error().ToError().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("exists with another configuration"), std::string::npos)
      << refused.error().message;
  // Left as it was: a message over 4096 bytes still fits.
  const std::string big(10000, 'x');
  auto stored = connection_->Publish(Message(big, "", std::nullopt), kWaitMs);
  ASSERT_TRUE(stored) << stored.error().message;
  EXPECT_EQ(stored->seq, 1u);

  auto missing = connection_->GetStreamState("NO_SUCH_STREAM");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().js_code, JSStreamNotFoundErr);
}

// The fence: an expected last sequence of 0, written by hand, holds on an empty stream; a
// stale expectation is refused with 10071; a resend with the same Msg-Id is answered
// "duplicate" with the original sequence whatever it expects (checked before it).
TEST_F(NatsClientTest, ExpectedLastSequenceFencesAndDuplicatesComeFirst) {
  auto first = connection_->Publish(Message("a", "id-a", 0), kWaitMs);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->seq, 1u);
  EXPECT_FALSE(first->duplicate);
  EXPECT_EQ(first->stream, "TEST");

  auto second = connection_->Publish(Message("b", "id-b", 0), kWaitMs);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().js_code, JSStreamWrongLastSequenceErr);
  EXPECT_EQ(ClassifyPublishFailure(second.error()), PublishFailure::kWrongLast);
  EXPECT_NE(second.error().message.find("wrong last sequence: 1"), std::string::npos)
      << second.error().message;

  auto resent = connection_->Publish(Message("a", "id-a", 7), kWaitMs);
  ASSERT_TRUE(resent) << resent.error().message;
  EXPECT_EQ(resent->seq, 1u);
  EXPECT_TRUE(resent->duplicate);

  auto state = connection_->GetStreamState("TEST");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->last_seq, 1u);
  EXPECT_EQ(state->messages, 1u);

  auto message = connection_->GetMessage("TEST", 1);
  ASSERT_TRUE(message) << message.error().message;
  ASSERT_TRUE(message->has_value());
  EXPECT_EQ((*message)->seq, 1u);
  EXPECT_EQ((*message)->msg_id, "id-a");
  EXPECT_EQ((*message)->data, "a");
  EXPECT_EQ((*message)->subject, "test.p");
  auto absent = connection_->GetMessage("TEST", 2);
  ASSERT_TRUE(absent) << absent.error().message;
  EXPECT_FALSE(absent->has_value());
}

// Why every record sent behind one still in flight carries Nats-Expected-Last-Msg-Id: the
// expected last sequence alone lets a pipelined record land after someone else's record.
// Writer A has record 2 in flight and record 3 behind it (expecting 2); a new owner's
// claim takes sequence 2 and A's record 2 is refused — yet A's record 3 finds the last
// sequence it expects and lands, after the claim. With its predecessor's Msg-Id expected,
// it is refused (10070).
TEST_F(NatsClientTest, PipelinedRecordsNeedTheirPredecessorsMsgId) {
  ASSERT_TRUE(connection_->Publish(Message("claim A", "A.1", 0), kWaitMs));
  ASSERT_TRUE(connection_->Publish(Message("claim B", "B.2", 1), kWaitMs));  // takes seq 2
  auto a2 = connection_->Publish(Message("A's 2", "A.2", 1), kWaitMs);
  ASSERT_FALSE(a2);
  EXPECT_EQ(a2.error().js_code, JSStreamWrongLastSequenceErr);

  const MessageHeader predecessor[] = {{"Nats-Expected-Last-Msg-Id", "A.2"}};
  Publication fenced = Message("A's 3", "A.3", 2);
  fenced.headers = predecessor;
  auto a3_fenced = connection_->Publish(fenced, kWaitMs);
  ASSERT_FALSE(a3_fenced);
  EXPECT_EQ(a3_fenced.error().js_code, JSStreamWrongLastMsgIDErr);
  EXPECT_EQ(ClassifyPublishFailure(a3_fenced.error()), PublishFailure::kWrongLast);

  auto a3_ghost = connection_->Publish(Message("A's 3", "A.3x", 2), kWaitMs);
  ASSERT_TRUE(a3_ghost) << "nats-server now refuses this too; the Msg-Id check stays harmless";
  EXPECT_EQ(a3_ghost->seq, 3u);
}

TEST_F(NatsClientTest, AsyncPublishesEachGetOneOutcome) {
  std::mutex mutex;
  std::condition_variable done;
  std::map<uint64_t, NatsResult<PubAck>> outcomes;
  auto publisher = AsyncPublisher::Create(*connection_, [&](uint64_t tag, NatsResult<PubAck> o) {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(outcomes.emplace(tag, std::move(o)).second) << "two outcomes for " << tag;
    done.notify_all();
  });
  ASSERT_TRUE(publisher) << publisher.error().message;
  constexpr int kCount = 200;
  for (int i = 0; i < kCount; ++i) {
    const std::string id = "m" + std::to_string(i);
    ASSERT_TRUE((*publisher)->Publish(i, Message("x", id, i), kWaitMs));
  }
  // A subject no stream listens to: nobody answers, and nats.c says so at once.
  Publication nowhere = Message("x", "", std::nullopt);
  nowhere.subject = "no.stream.here";
  ASSERT_TRUE((*publisher)->Publish(kCount, nowhere, kWaitMs));
  // MaxWait is required.
  EXPECT_FALSE((*publisher)->Publish(kCount + 1, Message("x", "", std::nullopt), 0));

  std::unique_lock lock(mutex);
  ASSERT_TRUE(done.wait_for(lock, 30s, [&] { return outcomes.size() == kCount + 1; }))
      << outcomes.size() << " outcomes";
  for (int i = 0; i < kCount; ++i) {
    const NatsResult<PubAck>& outcome = outcomes.at(i);
    ASSERT_TRUE(outcome) << i << ": " << outcome.error().message;
    EXPECT_EQ(outcome->seq, static_cast<uint64_t>(i) + 1);
  }
  const NatsResult<PubAck>& refused = outcomes.at(kCount);
  ASSERT_FALSE(refused);
  EXPECT_EQ(ClassifyPublishFailure(refused.error()), PublishFailure::kNoResponders);
  EXPECT_EQ(refused.error().js_code, 0) << "asynchronously, no responders carries no 10076";
  lock.unlock();
  // Outstanding drops just after each callback returns (nats_client.cc): give the last one
  // its moment.
  for (int i = 0; i < 500 && (*publisher)->outstanding() != 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ((*publisher)->outstanding(), 0u);
}

// A publish nobody answers times out; its answer could still come later, so the publisher,
// going away, leaves its context to the connection (kept until it closes) instead of
// destroying a subscription an answer may reach. The connection goes on working.
TEST_F(NatsClientTest, APublisherWhosePublishTimedOutGoesAwayAndTheConnectionWorks) {
  auto silent = PlainSubscriber::Start(*connection_, "silent.listener");
  ASSERT_TRUE(silent) << silent.error().message;
  std::mutex mutex;
  std::condition_variable done;
  std::optional<NatsResult<PubAck>> outcome;
  {
    auto publisher = AsyncPublisher::Create(*connection_, [&](uint64_t, NatsResult<PubAck> o) {
      std::lock_guard lock(mutex);
      outcome = std::move(o);
      done.notify_all();
    });
    ASSERT_TRUE(publisher) << publisher.error().message;
    Publication unanswered = Message("x", "", std::nullopt);
    unanswered.subject = "silent.listener";
    ASSERT_TRUE((*publisher)->Publish(1, unanswered, 200));
    std::unique_lock lock(mutex);
    ASSERT_TRUE(done.wait_for(lock, 30s, [&] { return outcome.has_value(); }));
    ASSERT_FALSE(*outcome);
    EXPECT_EQ(ClassifyPublishFailure(outcome->error()), PublishFailure::kTimeout);
    EXPECT_EQ(connection_->contexts_kept(), 0u);
  }
  EXPECT_EQ(connection_->contexts_kept(), 1u) << "the publisher's context was destroyed";
  auto heard = (*silent)->Next(kWaitMs);
  ASSERT_TRUE(heard) << heard.error().message;
  EXPECT_EQ(heard->value_or(""), "x");
  NatsResult<PubAck> stored = connection_->Publish(Message("after", "", std::nullopt), kWaitMs);
  ASSERT_TRUE(stored) << stored.error().message;
  EXPECT_EQ(stored->seq, 1u);
}

TEST_F(NatsClientTest, ReconnectsToAnotherServerAndSaysSo) {
  std::atomic<int> disconnects{0};
  std::atomic<int> reconnects{0};
  ConnectOptions options;
  options.on_disconnected = [&] { ++disconnects; };
  options.on_reconnected = [&](const std::string&) { ++reconnects; };
  auto connection = cluster_->Connect(options);
  ASSERT_TRUE(connection) << connection.error().message;
  const std::string before = (*connection)->connected_url();
  int index = -1;
  for (int i = 0; i < cluster_->size(); ++i) {
    if (cluster_->url(i) == before) index = i;
  }
  ASSERT_GE(index, 0) << before;
  cluster_->Kill(index);
  for (int i = 0; i < 200 && reconnects.load() == 0; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(disconnects.load(), 1);
  EXPECT_EQ(reconnects.load(), 1);
  EXPECT_TRUE((*connection)->connected());
  EXPECT_NE((*connection)->connected_url(), before);
  EXPECT_EQ((*connection)->reconnects(), 1u);
  // Still usable: the stream has two of its three replicas. When the killed server led the
  // stream, nobody answers until the other two have elected a leader (a few seconds): a
  // publish refused with "no responders" was not stored, and is sent again. The Msg-Id
  // makes a resend after a timeout harmless too.
  NatsResult<PubAck> stored = (*connection)->Publish(Message("after", "after", std::nullopt), 5000);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!stored && std::chrono::steady_clock::now() < deadline &&
         ClassifyPublishFailure(stored.error()) != PublishFailure::kWrongLast) {
    std::this_thread::sleep_for(100ms);
    stored = (*connection)->Publish(Message("after", "after", std::nullopt), 5000);
  }
  ASSERT_TRUE(stored) << stored.error().message;
  EXPECT_EQ(stored->seq, 1u);
}

// nats.c 3.4.1's read loop could take a message's subscription from the connection's table
// and lock it after the subscription was freed (fixed upstream in 3.6.0): a subscription
// ended while its messages arrive crashed the process (seen as a tallyd killed by SIGSEGV in
// natsConn_processMsg). Subscriptions are ended through NatsConnection::Retire: here many
// of them, plain and ordered, end while a publisher floods their subjects.
TEST_F(NatsClientTest, SubscriptionsEndSafelyWhileTheirMessagesArrive) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> published{0};
  std::thread flood([&] {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!stop.load() && std::chrono::steady_clock::now() < deadline) {
      if (connection_->PublishPlain("flood", "x")) ++published;
      if (published.load() % 64 == 0) std::this_thread::sleep_for(50us);
    }
  });
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(connection_->Publish(Message("s", "", std::nullopt), kWaitMs));
  }
  int plain_received = 0;
  int ordered_received = 0;
  for (int round = 0; round < 300; ++round) {
    auto plain = PlainSubscriber::Start(*connection_, "flood");
    ASSERT_TRUE(plain) << plain.error().message;
    auto message = (*plain)->Next(kWaitMs);
    ASSERT_TRUE(message) << message.error().message;
    if (message->has_value()) ++plain_received;
    if (round % 10 == 0) {
      auto ordered = OrderedConsumer::Start(*connection_, "TEST", "test.p", 1);
      ASSERT_TRUE(ordered) << ordered.error().message;
      auto stored = (*ordered)->Next(kWaitMs);
      ASSERT_TRUE(stored) << stored.error().message;
      if (stored->has_value()) ++ordered_received;
    }
  }
  stop = true;
  flood.join();
  EXPECT_EQ(plain_received, 300) << "each subscriber got a message of the flood";
  EXPECT_EQ(ordered_received, 30);
  EXPECT_GT(published.load(), 0u);
}

// With two of three servers gone, the stream has no leader; nats-server 2.9 then answers a
// stream info from the remaining replica's own state (PartitionReader::Open relies on
// telling that apart: such a replica may be behind).
TEST_F(NatsClientTest, AStreamWithoutALeaderIsSaidToBeSo) {
  auto led = connection_->GetStreamState("TEST");
  ASSERT_TRUE(led) << led.error().message;
  EXPECT_FALSE(led->leaderless);
  EXPECT_FALSE(led->leader.empty());
  const std::string connected = connection_->connected_url();
  for (int i = 0; i < cluster_->size(); ++i) {
    if (cluster_->url(i) != connected) cluster_->Kill(i);
  }
  NatsResult<StreamState> state = connection_->GetStreamState("TEST");
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while ((!state || !state->leaderless) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    state = connection_->GetStreamState("TEST");
  }
  ASSERT_TRUE(state) << state.error().message;
  EXPECT_TRUE(state->leaderless);
  EXPECT_TRUE(state->leader.empty());
  // A reader ahead of what that replica holds is asked to come back, not told the stream
  // lost records (which would stop its follower for good).
  auto reader = PartitionReader::Open(*connection_, "TEST", "test.p", state->last_seq + 5);
  ASSERT_FALSE(reader);
  EXPECT_EQ(reader.error().code, ErrorCode::kUnavailable) << reader.error().message;
}

}  // namespace
}  // namespace tally::cluster
