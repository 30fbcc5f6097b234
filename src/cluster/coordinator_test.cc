// Coordinators of several nodes in one process, against three real nats-servers (started by
// each test): a cold cluster's partitions get owners, spread evenly; a node that joins later
// gets its share handed over, values intact; an owner gone silent is replaced by a standby
// after the lease, with every write it had made durable; an owner fenced by another node's
// claim closes its waiting clients before any of its commits is announced, then follows the
// partition again and ends with the stream's values.
#include "cluster/coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/nats_test_cluster.h"
#include "cluster/partition_test_support.h"
#include "core/slot.h"
#include "core/test_dir.h"
#include "engine/engine.h"
#include "engine/engine_test_support.h"
#include "engine/increment_buffer.h"

namespace tally::cluster {
namespace {

using namespace std::chrono_literals;
using engine::test_support::Contents;
using engine::test_support::Snap;

constexpr uint32_t kPartitions = 4;
constexpr int64_t kLeaseMs = 800;

// A key of `partition`.
std::string KeyOf(uint32_t partition, int n = 0) {
  for (int i = 0;; ++i) {
    std::string key = "key" + std::to_string(i);
    if (SlotPartition(KeySlot(key), kPartitions) == partition && n-- == 0) return key;
  }
}

// One node: its engine over its ClusterPersistence, its heartbeats and its coordinator.
struct TestNode {
  std::string name;
  std::unique_ptr<NatsConnection> connection;
  std::unique_ptr<ClusterPersistence> persistence;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<Routing> routing;
  std::unique_ptr<Membership> membership;
  std::unique_ptr<Coordinator> coordinator;
  std::atomic<Coordinator*> coordinator_for_heartbeats{nullptr};
  std::atomic<int> closes{0};  // close_clients calls
  // The durable epoch when close_clients was last called.
  std::atomic<uint64_t> durable_at_close{0};

  ~TestNode() { Stop(); }
  void Stop() {
    if (coordinator) coordinator->Stop();
    if (engine) engine->Stop();
    if (membership) membership->Leave();
    if (persistence) persistence->Close();
    membership.reset();
    coordinator_for_heartbeats = nullptr;
    coordinator.reset();
    engine.reset();
    persistence.reset();
  }
  // The partitions whose route here is kServe.
  std::vector<uint32_t> Served() const {
    std::vector<uint32_t> served;
    for (uint32_t p = 0; p < kPartitions; ++p) {
      if (routing->route(p) == Route::kServe) served.push_back(p);
    }
    return served;
  }
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDirectory("tally_coordinator_test_");
    std::filesystem::remove_all(dir_);
    auto started = NatsTestCluster::Start();
    ASSERT_TRUE(started) << started.error().message;
    cluster_ = std::move(*started);
    auto connection = cluster_->Connect();
    ASSERT_TRUE(connection) << connection.error().message;
    for (uint32_t p = 0; p < kPartitions; ++p) {
      StreamConfig config;
      config.name = "TALLY_P" + std::to_string(p);
      config.subjects = {"tally.p." + std::to_string(p)};
      auto state = NatsTestCluster::EnsureStream(**connection, config);
      ASSERT_TRUE(state) << state.error().message;
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `lease_ms`: how long this node lets an owner be silent; `renew_ms`: how often it renews
  // what it owns (0: never).
  void Start(TestNode* node, const std::string& name, int64_t lease_ms = kLeaseMs,
             int64_t renew_ms = kLeaseMs / 4) {
    node->name = name;
    auto connection = cluster_->Connect();
    ASSERT_TRUE(connection) << connection.error().message;
    node->connection = std::move(*connection);
    ClusterPersistenceOptions options;
    options.data_dir = (dir_ / name).string();
    options.partition_count = kPartitions;
    options.node_name = name;
    options.renew_ms = renew_ms;
    auto persistence = ClusterPersistence::Open(*node->connection, options);
    ASSERT_TRUE(persistence) << persistence.error().message;
    node->persistence = std::move(*persistence);
    node->engine =
        std::make_unique<engine::Engine>(node->persistence.get(), engine::EngineOptions{});
    node->persistence->Attach(node->engine->keyspace());
    auto loaded = node->engine->Start();
    ASSERT_TRUE(loaded) << loaded.error().message;
    ClaimBody identity;
    identity.node_name = name;
    identity.redis_address = "127.0.0.1:" + name;
    node->persistence->SetIdentity(identity);
    node->routing = std::make_unique<Routing>(kPartitions);

    MembershipOptions membership;
    membership.subject = "tally.members";
    membership.heartbeat_ms = kLeaseMs / 4;
    membership.timeout_ms = kLeaseMs;
    TestNode* self = node;
    auto beating = Membership::Start(*node->connection, membership, [self] {
      MemberInfo info;
      info.node_id = self->persistence->node_id();
      info.node_name = self->name;
      info.redis_address = "127.0.0.1:" + self->name;
      info.draining = self->routing->drain_requested();
      if (Coordinator* coordinator = self->coordinator_for_heartbeats.load()) {
        info.owned = coordinator->Owned();
      }
      return info;
    });
    ASSERT_TRUE(beating) << beating.error().message;
    node->membership = std::move(*beating);
    CoordinatorOptions coordinator;
    coordinator.lease_ms = lease_ms;
    coordinator.claim_step_ms = kLeaseMs / 4;
    coordinator.settle_ms = kLeaseMs / 2;
    node->coordinator = std::make_unique<Coordinator>(
        *node->persistence, *node->membership, *node->routing, *node->connection, coordinator,
        [self] {
          self->durable_at_close = self->engine->committer().durable_epoch();
          ++self->closes;
        },
        [] {});
    node->coordinator_for_heartbeats = node->coordinator.get();
    node->persistence->SetOnChange([self] { self->coordinator->Wake(); });
    node->coordinator->Start();
  }

  // Waits until every partition is served by exactly one of `nodes`.
  static bool WaitAllServed(const std::vector<TestNode*>& nodes, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      size_t served = 0;
      for (const TestNode* node : nodes) served += node->Served().size();
      if (served == kPartitions) {
        std::vector<int> owners(kPartitions, 0);
        for (const TestNode* node : nodes) {
          for (uint32_t p : node->Served()) ++owners[p];
        }
        if (std::all_of(owners.begin(), owners.end(), [](int n) { return n == 1; })) return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // Waits until every partition is served by one of `nodes` and each serves `shares[i]`.
  static bool WaitShares(const std::vector<TestNode*>& nodes, const std::vector<size_t>& shares,
                         std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      bool even = true;
      for (size_t i = 0; i < nodes.size(); ++i)
        even = even && nodes[i]->Served().size() == shares[i];
      if (even && WaitAllServed(nodes, 1s)) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  // Adds `delta` to `key` on `node` and waits until it is durable (acknowledged).
  static void Increment(TestNode& node, const std::string& key, int64_t delta) {
    engine::IncrementBuffer buffer(&node.engine->keyspace());
    buffer.Add(engine::HashedKey(key), delta);
    node.engine->committer().WaitDurable(buffer.Publish());
  }

  // The value of `key` on `node`; nullopt when missing.
  static std::optional<int64_t> Value(TestNode& node, const std::string& key) {
    engine::HashedKey hashed(key);
    engine::View view = node.engine->keyspace().Lock(hashed);
    return view.Get(hashed);
  }

  static bool WaitValue(TestNode& node, const std::string& key, int64_t value,
                        std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Value(node, key) != value) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }

  std::filesystem::path dir_;
  std::unique_ptr<NatsTestCluster> cluster_;
};

TEST_F(CoordinatorTest, AColdClusterGetsEveryPartitionOwnedAndSpread) {
  TestNode a, b;
  ASSERT_NO_FATAL_FAILURE(Start(&a, "7001"));
  ASSERT_NO_FATAL_FAILURE(Start(&b, "7002"));
  // Evenly at once, or, when b's first heartbeats reached a late (a slow machine), after the
  // balance's hand-over.
  EXPECT_TRUE(WaitShares({&a, &b}, {2, 2}, 30s));
  // Each node routes the other's partitions there (once it has read the claims: a hand-over's
  // reaches a a moment after b serves).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  const auto moved_here = [&] {
    const std::vector<uint32_t> served = b.Served();  // one vector: its begin and its end
    return std::all_of(served.begin(), served.end(),
                       [&](uint32_t p) { return a.routing->route(p) == Route::kMoved; });
  };
  while (!moved_here() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  for (uint32_t p : b.Served()) {
    EXPECT_EQ(a.routing->route(p), Route::kMoved);
    EXPECT_EQ(a.routing->topology()->partitions[p].owner_address, "127.0.0.1:7002");
  }
  EXPECT_EQ(a.closes.load(), 0);
}

TEST_F(CoordinatorTest, ANodeThatJoinsLaterGetsItsShareHandedOver) {
  TestNode a, b;
  ASSERT_NO_FATAL_FAILURE(Start(&a, "7001"));
  ASSERT_TRUE(WaitAllServed({&a}, 30s));
  for (uint32_t p = 0; p < kPartitions; ++p) Increment(a, KeyOf(p), 7);
  ASSERT_NO_FATAL_FAILURE(Start(&b, "7002"));
  ASSERT_TRUE(WaitShares({&a, &b}, {2, 2}, 60s));
  EXPECT_EQ(a.coordinator->releases(), 2u);
  EXPECT_EQ(a.closes.load(), 0);  // handed over, not taken: nobody's reply was at risk
  for (uint32_t p : b.Served()) {
    EXPECT_EQ(Value(b, KeyOf(p)), 7) << p;
    Increment(b, KeyOf(p), 1);
    EXPECT_TRUE(WaitValue(a, KeyOf(p), 8, 20s)) << p;
  }
}

TEST_F(CoordinatorTest, ADrainingNodeHandsEveryPartitionOverAndClaimsNone) {
  TestNode a, b;
  ASSERT_NO_FATAL_FAILURE(Start(&a, "7001"));
  ASSERT_NO_FATAL_FAILURE(Start(&b, "7002"));
  ASSERT_TRUE(WaitShares({&a, &b}, {2, 2}, 30s));
  const std::vector<uint32_t> of_a = a.Served();
  for (uint32_t p : of_a) Increment(a, KeyOf(p), 7);

  // (How many hand-overs that takes is not fixed: while a heartbeat is late, b may still see a
  // as a member that takes partitions, and a may see itself alone.)
  const uint64_t a_released = a.coordinator->releases();
  a.routing->RequestDrain(true);
  ASSERT_TRUE(WaitShares({&a, &b}, {0, kPartitions}, 60s));
  EXPECT_GE(a.coordinator->releases() - a_released, 2u);
  EXPECT_EQ(a.closes.load(), 0);  // handed over, not taken
  for (uint32_t p : of_a) {
    EXPECT_EQ(Value(b, KeyOf(p)), 7) << p;
    Increment(b, KeyOf(p), 1);
    EXPECT_TRUE(WaitValue(a, KeyOf(p), 8, 20s)) << p;  // a still follows
  }
  // Still nothing for a two leases later: b does not hand back to a draining node.
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * kLeaseMs));
  EXPECT_TRUE(a.Served().empty());
  EXPECT_EQ(a.routing->topology()->Node(a.persistence->node_id())->draining, true);

  a.routing->RequestDrain(false);  // taken back: b evens out again
  EXPECT_TRUE(WaitShares({&a, &b}, {2, 2}, 60s));
}

TEST_F(CoordinatorTest, ASilentOwnerIsReplacedWithEveryAcknowledgedWrite) {
  TestNode a, b;
  ASSERT_NO_FATAL_FAILURE(Start(&a, "7001"));
  ASSERT_NO_FATAL_FAILURE(Start(&b, "7002"));
  ASSERT_TRUE(WaitAllServed({&a, &b}, 30s));
  const std::vector<uint32_t> of_a = a.Served();
  ASSERT_FALSE(of_a.empty());
  const std::string key = KeyOf(of_a[0]);
  Increment(a, key, 5);
  Increment(a, key, 6);
  // a's writers go silent (as a process stopped or cut off would); its heartbeats go on, so
  // b replaces it for its silence on the stream alone.
  a.coordinator->Stop();
  a.engine->Stop();
  a.persistence->Close();
  const auto silent = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitAllServed({&b}, 30s));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - silent);
  EXPECT_GE(took.count(), kLeaseMs);  // not before the lease ran out
  EXPECT_EQ(Value(b, key), 11);
  Increment(b, key, 1);
  EXPECT_EQ(Value(b, key), 12);
}

TEST_F(CoordinatorTest, AFencedOwnerClosesItsWaitingClientsThenFollowsTheStream) {
  // a writes nothing to its partitions but what the test commits (no renewals), and b lets
  // them be: a learns of the fence from the test's write alone.
  TestNode a, b;
  ASSERT_NO_FATAL_FAILURE(Start(&a, "7001", kLeaseMs, /*renew_ms=*/0));
  ASSERT_NO_FATAL_FAILURE(Start(&b, "7002", /*lease_ms=*/600'000));
  ASSERT_TRUE(WaitAllServed({&a, &b}, 30s));
  const uint32_t p = a.Served()[0];
  const std::string key = KeyOf(p);
  Increment(a, key, 10);
  ASSERT_TRUE(WaitValue(b, key, 10, 20s));

  // b takes the partition while a still owns it (as after a pause of a beyond its lease).
  b.coordinator->Stop();
  auto claimed = b.persistence->ClaimNow(p, 20s);
  ASSERT_TRUE(claimed) << claimed.error().message;
  Increment(b, key, 100);  // 110 in the stream

  // a's next write to the partition can never become durable: a learns it is fenced, closes
  // its waiting clients, and only then announces the epoch; it then reads the stream again.
  engine::IncrementBuffer buffer(&a.engine->keyspace());
  buffer.Add(engine::HashedKey(key), 1000);
  const uint64_t epoch = buffer.Publish();
  EXPECT_EQ(a.closes.load(), 0);
  a.engine->committer().WaitDurable(epoch);
  EXPECT_EQ(a.closes.load(), 1);
  EXPECT_LT(a.durable_at_close.load(), epoch);
  EXPECT_EQ(a.coordinator->losses(), 1u);
  EXPECT_NE(a.routing->route(p), Route::kServe);
  ASSERT_TRUE(WaitValue(a, key, 110, 20s));
  EXPECT_EQ(Value(b, key), 110);
}

}  // namespace
}  // namespace tally::cluster
