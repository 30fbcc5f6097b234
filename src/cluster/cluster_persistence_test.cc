// ClusterPersistence against three real nats-servers (started by each test, stopped at its
// end): two nodes, each an engine over a ClusterPersistence with its own data directory,
// share the partition streams; each owns some partitions and follows the others. What one
// node commits appears on the other; a restarted node resumes from its saved positions; a
// checkpoint cut short by a crash makes the next start rebuild the partitions it owned from
// their streams.
#include "cluster/cluster_persistence.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
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
using engine::test_support::Snapshot;

constexpr uint32_t kPartitions = 2;

// A tally node: its engine over its ClusterPersistence.
struct Node {
  std::unique_ptr<ClusterPersistence> persistence;
  std::unique_ptr<engine::Engine> engine;

  ~Node() { Stop(); }
  // The order engine/cluster_persistence.h asks for: the engine's last commit, then the
  // followers and logs, then the engine.
  void Stop() {
    if (engine) engine->Stop();
    if (persistence) persistence->Close();
    engine.reset();
    persistence.reset();
  }
  Snapshot Values() { return Snap(Contents(engine->keyspace())); }
};

// `count` keys "k<i>" of partition `partition`.
std::vector<std::string> KeysOf(uint32_t partition, int count) {
  std::vector<std::string> keys;
  for (int i = 0; static_cast<int>(keys.size()) < count; ++i) {
    std::string key = "k" + std::to_string(i);
    if (SlotPartition(KeySlot(key), kPartitions) == partition) keys.push_back(std::move(key));
  }
  return keys;
}

class ClusterPersistenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDirectory("tally_cluster_persistence_test_");
    std::filesystem::remove_all(dir_);
    StreamConfig config;
    config.name = "TALLY_P0";
    config.subjects = {"tally.p.0"};
    StartWithStream(config, &cluster_, &connection_a_);
    config.name = "TALLY_P1";
    config.subjects = {"tally.p.1"};
    auto second = NatsTestCluster::EnsureStream(*connection_a_, config);
    ASSERT_TRUE(second) << second.error().message;
    auto connected = cluster_->Connect();
    ASSERT_TRUE(connected) << connected.error().message;
    connection_b_ = std::move(*connected);
    StreamConfig snapshots;
    snapshots.name = "TALLY_SNAPSHOTS";
    snapshots.subjects = {"tally.snap.>"};
    auto third = NatsTestCluster::EnsureStream(*connection_a_, snapshots);
    ASSERT_TRUE(third) << third.error().message;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Starts a node on data directory `name` owning `owned`, over `connection`.
  static void StartNode(Node* node, NatsConnection& connection, const std::filesystem::path& dir,
                        std::vector<uint32_t> owned, size_t max_record_bytes = 256 * 1024,
                        bool follow_on_load = true, uint64_t snapshot_every_records = 0,
                        const LeaderConnections* leaders = nullptr) {
    ClusterPersistenceOptions options;
    options.data_dir = dir.string();
    options.partition_count = kPartitions;
    options.owned = std::move(owned);
    options.follow_on_load = follow_on_load;
    options.node_name = dir.filename().string();
    options.max_record_bytes = max_record_bytes;
    options.snapshot_every_records = snapshot_every_records;
    options.snapshot_chunk_bytes = 2000;  // snapshots of a few hundred keys in several chunks
    options.leaders = leaders;
    auto persistence = ClusterPersistence::Open(connection, options);
    ASSERT_TRUE(persistence) << persistence.error().message;
    node->persistence = std::move(*persistence);
    node->engine =
        std::make_unique<engine::Engine>(node->persistence.get(), engine::EngineOptions{});
    node->persistence->Attach(node->engine->keyspace());
    auto started = node->engine->Start();
    ASSERT_TRUE(started) << started.error().message;
  }

  // Adds `delta` to every key on `node` and waits until the commit is durable (in the
  // partition's stream).
  static void Increment(Node& node, const std::vector<std::string>& keys, int64_t delta) {
    engine::IncrementBuffer buffer(&node.engine->keyspace());
    for (const std::string& key : keys) buffer.Add(engine::HashedKey(key), delta);
    node.engine->committer().WaitDurable(buffer.Publish());
  }

  // Waits until `follower`'s node has applied partition p up to what `owner` made durable.
  static void WaitFollowed(Node& follower, Node& owner, uint32_t partition) {
    const uint64_t durable = owner.persistence->log(partition)->progress().durable_seq;
    const FollowerPosition reached =
        follower.persistence->follower(partition)->WaitApplied(durable, 20s);
    ASSERT_GE(reached.seq, durable);
  }

  // Calls Step as the coordinator would, until `done` (at most 20 s).
  static bool StepUntil(Node& node, const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      node.persistence->Step();
      if (done()) return true;
      std::this_thread::sleep_for(20ms);
    }
    return done();
  }

  // Checkpoints `node` and waits until its snapshot thread trimmed `trims` times in all.
  static void CheckpointAndWaitTrims(Node& node, uint64_t trims) {
    ASSERT_TRUE(node.engine->committer().CheckpointNow().has_value());
    ASSERT_TRUE(StepUntil(node, [&] { return node.persistence->snapshot_stats().trims >= trims; }))
        << "trims: " << node.persistence->snapshot_stats().trims
        << ", failures: " << node.persistence->snapshot_stats().failures;
  }

  // Starts `node` on a fresh or stale data directory and waits until it restored `restores`
  // partitions from snapshots and follows both.
  static void StartAndRestore(Node* node, NatsConnection& connection,
                              const std::filesystem::path& dir, uint64_t restores) {
    ASSERT_NO_FATAL_FAILURE(StartNode(node, connection, dir, {}, 256 * 1024, true, 1));
    ASSERT_TRUE(StepUntil(*node,
                          [&] {
                            return node->persistence->snapshot_stats().restores >= restores &&
                                   node->persistence->follower(0) != nullptr &&
                                   node->persistence->follower(1) != nullptr;
                          }))
        << "restores: " << node->persistence->snapshot_stats().restores
        << ", role 0: " << PartitionRoleName(node->persistence->role(0))
        << ", failure 0: " << node->persistence->status(0).failure;
  }

  std::filesystem::path dir_;
  std::unique_ptr<NatsTestCluster> cluster_;
  std::unique_ptr<NatsConnection> connection_a_;
  std::unique_ptr<NatsConnection> connection_b_;
};

TEST_F(ClusterPersistenceTest, WritesOnAnOwnerAppearOnTheNodeFollowingIt) {
  Node a, b;
  ASSERT_NO_FATAL_FAILURE(StartNode(&a, *connection_a_, dir_ / "a", {0}));
  ASSERT_NO_FATAL_FAILURE(StartNode(&b, *connection_b_, dir_ / "b", {1}));
  ASSERT_TRUE(a.persistence->log(0) && a.persistence->follower(1));
  ASSERT_TRUE(b.persistence->log(1) && b.persistence->follower(0));

  const std::vector<std::string> keys_a = KeysOf(0, 40);
  const std::vector<std::string> keys_b = KeysOf(1, 40);
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_a, 5));
  ASSERT_NO_FATAL_FAILURE(Increment(b, keys_b, 7));
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_a[0]}, 100));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(a, b, 1));

  Snapshot expected;
  for (const std::string& key : keys_a) expected[key] = {5, 0};
  for (const std::string& key : keys_b) expected[key] = {7, 0};
  expected[keys_a[0]] = {105, 0};
  EXPECT_EQ(a.Values(), expected);
  EXPECT_EQ(b.Values(), expected);
  // One record a commit, in the owner's stream only: a's claim and two batches; b's claim
  // and one batch. What a node applied as a follower was not published again.
  EXPECT_EQ(a.persistence->log(0)->progress().durable_seq, 3u);
  EXPECT_EQ(b.persistence->log(1)->progress().durable_seq, 2u);
  EXPECT_EQ(b.persistence->follower(0)->stats().applied_records, 2u);
  EXPECT_EQ(a.persistence->follower(1)->stats().applied_records, 1u);
}

// With LeaderConnections, a claimed partition's log publishes through the connection on its
// stream's leader and says so in its status; its records reach the other node as any do.
TEST_F(ClusterPersistenceTest, AClaimedPartitionPublishesOnItsStreamsLeader) {
  ConnectOptions options;
  options.servers = cluster_->urls();
  const auto leaders = LeaderConnections::Open(options);  // outlives the nodes
  Node a, b;
  ASSERT_NO_FATAL_FAILURE(
      StartNode(&a, *connection_a_, dir_ / "a", {0}, 256 * 1024, true, 0, leaders.get()));
  ASSERT_NO_FATAL_FAILURE(StartNode(&b, *connection_b_, dir_ / "b", {1}));
  auto state = connection_a_->GetStreamState("TALLY_P0");
  ASSERT_TRUE(state) << state.error().message;
  ASSERT_FALSE(state->leader.empty());
  EXPECT_EQ(a.persistence->status(0).log_server, state->leader);
  EXPECT_EQ(b.persistence->status(1).log_server, "");  // b has none: its own connection

  const std::vector<std::string> keys = KeysOf(0, 40);
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys, 3));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  Snapshot expected;
  for (const std::string& key : keys) expected[key] = {3, 0};
  EXPECT_EQ(b.Values(), expected);
}

TEST_F(ClusterPersistenceTest, ARestartedNodeResumesFromItsCheckpointedPositions) {
  Node a, b;
  ASSERT_NO_FATAL_FAILURE(StartNode(&a, *connection_a_, dir_ / "a", {0, 1}));
  ASSERT_NO_FATAL_FAILURE(StartNode(&b, *connection_b_, dir_ / "b", {}));
  const std::vector<std::string> keys_0 = KeysOf(0, 30);
  const std::vector<std::string> keys_1 = KeysOf(1, 30);
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_0, 1));
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_1, 2));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 1));
  ASSERT_TRUE(b.engine->committer().CheckpointNow().has_value());
  const uint64_t saved_0 = a.persistence->log(0)->progress().durable_seq;
  const uint64_t saved_1 = a.persistence->log(1)->progress().durable_seq;
  b.Stop();

  // While b is down: three more records in partition 0, one in partition 1.
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_0[0]}, 10));
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_0[1]}, 20));
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_0[2], keys_1[0]}, 30));

  ASSERT_NO_FATAL_FAILURE(StartNode(&b, *connection_b_, dir_ / "b", {}));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 1));
  EXPECT_EQ(b.Values(), a.Values());
  EXPECT_EQ(b.Values().at(keys_0[2]), (std::pair<int64_t, int64_t>{31, 0}));
  // Only what followed the saved positions was read again.
  EXPECT_EQ(b.persistence->follower(0)->stats().records,
            a.persistence->log(0)->progress().durable_seq - saved_0);
  EXPECT_EQ(b.persistence->follower(1)->stats().records,
            a.persistence->log(1)->progress().durable_seq - saved_1);
  EXPECT_EQ(b.persistence->follower(0)->stats().records, 3u);
}

// A node (follow_on_load false) applies nothing of the streams until StartFollowers, which
// it calls once its observer is in place: the observer is told of every key written.
TEST_F(ClusterPersistenceTest, FollowersWaitForStartFollowersAndTheObserverSeesAllTheyWrite) {
  Node a, b;
  ASSERT_NO_FATAL_FAILURE(StartNode(&a, *connection_a_, dir_ / "a", {0, 1}));
  const std::vector<std::string> keys_0 = KeysOf(0, 20);
  const std::vector<std::string> keys_1 = KeysOf(1, 20);
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_0, 1));
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_1, 2));

  ASSERT_NO_FATAL_FAILURE(
      StartNode(&b, *connection_b_, dir_ / "b", {}, 256 * 1024, /*follow_on_load=*/false));
  EXPECT_EQ(b.persistence->follower(0), nullptr);
  EXPECT_EQ(b.persistence->follower(1), nullptr);
  std::this_thread::sleep_for(200ms);  // a follower started by Load would have applied by now
  EXPECT_TRUE(b.Values().empty());

  std::mutex mutex;
  std::set<std::string> observed;
  b.persistence->SetReplicationObserver(
      [&](std::span<const engine::CommitBatch* const> batches) {
        std::lock_guard lock(mutex);
        for (const engine::CommitBatch* batch : batches) {
          for (size_t i = 0; i < batch->put_count(); ++i) observed.emplace(batch->put_key(i));
        }
      },
      nullptr);
  b.persistence->StartFollowers();
  b.persistence->StartFollowers();  // idempotent
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 1));
  EXPECT_EQ(b.Values(), a.Values());
  std::set<std::string> written(keys_0.begin(), keys_0.end());
  written.insert(keys_1.begin(), keys_1.end());
  std::lock_guard lock(mutex);
  EXPECT_EQ(observed, written);
}

TEST_F(ClusterPersistenceTest, ACheckpointCutShortIsRebuiltFromTheStreams) {
  const std::vector<std::string> keys_0 = KeysOf(0, 20);
  const std::vector<std::string> keys_1 = KeysOf(1, 20);
  Snapshot written;
  {
    Node a;
    ASSERT_NO_FATAL_FAILURE(StartNode(&a, *connection_a_, dir_ / "a", {0, 1}));
    ASSERT_NO_FATAL_FAILURE(Increment(a, keys_0, 3));
    ASSERT_TRUE(a.engine->committer().CheckpointNow().has_value());
    ASSERT_NO_FATAL_FAILURE(Increment(a, keys_1, 4));
    written = a.Values();
    a.engine->Stop();
    // A checkpoint that got as far as writing values the streams never received (an owner's
    // epoch not yet published), then the process died: no FinishCheckpoint.
    auto token = a.persistence->BeginCheckpoint();
    ASSERT_TRUE(token);
    a.persistence->CheckpointCut(*token);
    engine::CommitBatch phantom;
    phantom.AddPut(keys_0[0], {999, 0});
    phantom.AddPut(keys_1[0], {999, 0});
    phantom.AddPut(KeysOf(0, 21).back(), {1, 0});
    ASSERT_TRUE(a.persistence->CheckpointWrite(phantom).has_value());
  }
  Node a;
  ASSERT_NO_FATAL_FAILURE(StartNode(&a, *connection_a_, dir_ / "a", {0, 1}));
  EXPECT_EQ(a.Values(), written);

  // The follower of both streams agrees.
  Node b;
  ASSERT_NO_FATAL_FAILURE(StartNode(&b, *connection_b_, dir_ / "b", {}));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 1));
  EXPECT_EQ(b.Values(), written);
}

TEST_F(ClusterPersistenceTest, AShareTooLargeForOneRecordIsPublishedAndAppliedAsAGroup) {
  Node a, b;
  ASSERT_NO_FATAL_FAILURE(StartNode(&a, *connection_a_, dir_ / "a", {0, 1}, 1000));
  ASSERT_NO_FATAL_FAILURE(StartNode(&b, *connection_b_, dir_ / "b", {}));
  const std::vector<std::string> keys = KeysOf(0, 300);
  const uint64_t before = a.persistence->log(0)->progress().durable_seq;
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys, 9));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  const uint64_t records = a.persistence->log(0)->progress().durable_seq - before;
  EXPECT_GT(records, 2u);  // 300 puts of ~10 bytes in records of at most 1000
  const FollowerStats stats = b.persistence->follower(0)->stats();
  EXPECT_EQ(stats.applied_records, records);
  EXPECT_EQ(stats.applied_groups, 1u);
  Snapshot expected;
  for (const std::string& key : keys) expected[key] = {9, 0};
  EXPECT_EQ(b.Values(), expected);
}

// Snapshots bound the streams: the owner trims each stream below its snapshot, a new node
// restores both partitions from the snapshots (several chunks each) and follows the tail,
// and a node that was down while the streams were trimmed past its checkpoint is restored
// too. Values exact on both nodes throughout.
TEST_F(ClusterPersistenceTest, ANodeWhoseRecordsWereTrimmedIsRestoredFromASnapshot) {
  Node a, b;
  ASSERT_NO_FATAL_FAILURE(StartNode(&a, *connection_a_, dir_ / "a", {0, 1}, 256 * 1024, true, 1));
  const std::vector<std::string> keys_0 = KeysOf(0, 300);
  const std::vector<std::string> keys_1 = KeysOf(1, 120);
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_0, 3));
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_1, 4));
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_0[1]}, 50));
  ASSERT_NO_FATAL_FAILURE(CheckpointAndWaitTrims(a, 2));
  EXPECT_EQ(a.persistence->snapshot_stats().written, 2u);
  const uint64_t snapshot_0 = a.persistence->status(0).snapshot_seq;
  EXPECT_EQ(snapshot_0, a.persistence->log(0)->progress().durable_seq);
  auto trimmed = connection_a_->GetStreamState("TALLY_P0");
  ASSERT_TRUE(trimmed);
  EXPECT_EQ(trimmed->first_seq, snapshot_0 + 1);  // everything up to the snapshot is gone
  // The tail after the snapshots.
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_0[0]}, 100));
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_1[0]}, 200));

  ASSERT_NO_FATAL_FAILURE(StartAndRestore(&b, *connection_b_, dir_ / "b", 2));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 1));
  EXPECT_EQ(b.Values(), a.Values());
  EXPECT_EQ(b.Values().at(keys_0[0]), (std::pair<int64_t, int64_t>{103, 0}));
  EXPECT_EQ(b.Values().at(keys_0[1]), (std::pair<int64_t, int64_t>{53, 0}));
  // Restored from the first snapshot or a newer one (a's own checkpoints go on, and its
  // renewals are records); only what followed it was read from the stream.
  const uint64_t restored_0 = b.persistence->status(0).snapshot_seq;
  EXPECT_GE(restored_0, snapshot_0);
  const uint64_t tail_read = b.persistence->follower(0)->stats().records;
  EXPECT_GE(tail_read, 1u);
  EXPECT_LE(tail_read, a.persistence->log(0)->progress().durable_seq - restored_0);

  // b saves its positions and stops; a writes on, snapshots and trims past them.
  ASSERT_TRUE(b.engine->committer().CheckpointNow().has_value());
  b.Stop();
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_0, 1));
  ASSERT_NO_FATAL_FAILURE(Increment(a, keys_1, 1));
  ASSERT_NO_FATAL_FAILURE(CheckpointAndWaitTrims(a, 4));
  ASSERT_NO_FATAL_FAILURE(StartAndRestore(&b, *connection_b_, dir_ / "b", 2));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 1));
  EXPECT_EQ(b.Values(), a.Values());
  EXPECT_EQ(b.Values().at(keys_0[0]), (std::pair<int64_t, int64_t>{104, 0}));

  // A checkpoint of b after the restore, and a restart: the saved positions are past the
  // trim, so b reads on from them without a snapshot.
  ASSERT_TRUE(b.engine->committer().CheckpointNow().has_value());
  b.Stop();
  ASSERT_NO_FATAL_FAILURE(StartNode(&b, *connection_b_, dir_ / "b", {}, 256 * 1024, true, 1));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 1));
  EXPECT_EQ(b.persistence->snapshot_stats().restores, 0u);
  EXPECT_EQ(b.Values(), a.Values());
}

TEST_F(ClusterPersistenceTest, ASnapshotNoNodeCouldRestoreFromIsReplaced) {
  // Snapshots every 1,000 records: none is due in this test by count.
  Node a, b;
  ASSERT_NO_FATAL_FAILURE(
      StartNode(&a, *connection_a_, dir_ / "a", {0, 1}, 256 * 1024, true, 1000));
  const std::vector<std::string> keys_0 = KeysOf(0, 50);
  const std::vector<std::string> keys_1 = KeysOf(1, 50);
  for (int round = 0; round < 3; ++round) {
    ASSERT_NO_FATAL_FAILURE(Increment(a, keys_0, 2));
    ASSERT_NO_FATAL_FAILURE(Increment(a, keys_1, 5));
  }

  // The stream loses its front without a snapshot to restore from (as nats-server 2.9.10
  // was seen to do after its servers were killed again and again): at its next checkpoint
  // the owner writes one.
  const uint64_t tail = a.persistence->log(0)->progress().durable_seq;
  ASSERT_TRUE(connection_a_->PurgeStream("TALLY_P0", tail));
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_0[0]}, 100));
  ASSERT_TRUE(a.engine->committer().CheckpointNow().has_value());
  ASSERT_TRUE(StepUntil(a, [&] { return a.persistence->snapshot_stats().written >= 1; }))
      << "failures: " << a.persistence->snapshot_stats().failures;
  EXPECT_GT(a.persistence->status(0).snapshot_seq, tail);
  // Partition 1's stream is whole, and 1,000 records from its first snapshot: none.
  EXPECT_EQ(a.persistence->status(1).snapshot_seq, 0u);
  EXPECT_EQ(a.persistence->snapshot_stats().written, 1u);

  // A new node restores partition 0 from it and reads partition 1 from the start.
  ASSERT_NO_FATAL_FAILURE(StartAndRestore(&b, *connection_b_, dir_ / "b", 1));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 1));
  EXPECT_EQ(b.Values(), a.Values());
  EXPECT_EQ(b.Values().at(keys_0[0]), (std::pair<int64_t, int64_t>{106, 0}));
  EXPECT_EQ(b.Values().at(keys_1[0]), (std::pair<int64_t, int64_t>{15, 0}));

  // The snapshot loses its chunks, its manifest kept (the same trouble in the snapshots'
  // stream): at the next checkpoint with something new, a new one, which a new node reads.
  auto snapshots = connection_a_->GetStreamState("TALLY_SNAPSHOTS");
  ASSERT_TRUE(snapshots);
  ASSERT_TRUE(
      connection_a_->PurgeStream("TALLY_SNAPSHOTS", snapshots->last_seq + 1, "tally.snap.0.c"));
  ASSERT_NO_FATAL_FAILURE(Increment(a, {keys_0[1]}, 7));
  ASSERT_TRUE(a.engine->committer().CheckpointNow().has_value());
  ASSERT_TRUE(StepUntil(a, [&] { return a.persistence->snapshot_stats().written >= 2; }))
      << "failures: " << a.persistence->snapshot_stats().failures;
  Node c;
  ASSERT_NO_FATAL_FAILURE(StartAndRestore(&c, *connection_b_, dir_ / "c", 1));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(c, a, 0));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(c, a, 1));
  EXPECT_EQ(c.Values(), a.Values());
  EXPECT_EQ(c.Values().at(keys_0[1]), (std::pair<int64_t, int64_t>{13, 0}));
}

TEST_F(ClusterPersistenceTest, ANodeFencedOutTakesItsOwnClaimForStaleUntilItReadsTheFence) {
  Node a, b;
  ASSERT_NO_FATAL_FAILURE(StartNode(&a, *connection_a_, dir_ / "a", {0, 1}));
  ASSERT_NO_FATAL_FAILURE(StartNode(&b, *connection_b_, dir_ / "b", {}));
  const std::vector<std::string> keys = KeysOf(0, 3);
  for (int i = 0; i < 200; ++i) ASSERT_NO_FATAL_FAILURE(Increment(a, {keys[i % 3]}, 1));
  ASSERT_NO_FATAL_FAILURE(WaitFollowed(b, a, 0));

  // b takes partition 0 over while a still owns it; a's next write is refused by the stream.
  auto claimed = b.persistence->ClaimNow(0, 20s);
  ASSERT_TRUE(claimed) << claimed.error().message;
  const uint64_t fence = b.persistence->status(0).owner.term;  // its claim's sequence
  engine::IncrementBuffer buffer(&a.engine->keyspace());
  buffer.Add(engine::HashedKey(keys[0]), 1000);
  buffer.Publish();
  ASSERT_TRUE(StepUntil(a, [&] { return a.persistence->role(0) == PartitionRole::kLost; }));

  // a reads the stream again from its start: until it reaches b's claim, the owner it knows
  // is its own old claim, and it says so.
  ASSERT_TRUE(a.persistence->FinishLoss(0));
  const PartitionStatus reading = a.persistence->status(0);
  EXPECT_TRUE(reading.position.seq >= fence || reading.behind_fence);
  const FollowerPosition reached = a.persistence->follower(0)->WaitApplied(fence, 20s);
  ASSERT_GE(reached.seq, fence);
  EXPECT_FALSE(a.persistence->status(0).behind_fence);
  EXPECT_EQ(a.persistence->status(0).owner.term, fence);
  EXPECT_EQ(a.Values(), b.Values());
  EXPECT_EQ(a.Values().at(keys[0]), (std::pair<int64_t, int64_t>{67, 0}));
}

}  // namespace
}  // namespace tally::cluster
