// PartitionLog and PartitionReader against three real nats-servers (JetStream clustered,
// an R3 stream), started by each test: chained asynchronous publishing, fencing of a stale
// writer, a kill -9 of the stream's leader and the loss of quorum while publishing, and
// purged ranges reported as gaps. Each test prints the figures it saw.
#include "cluster/partition_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cluster/partition_reader.h"
#include "cluster/partition_test_support.h"

namespace tally::cluster {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class PartitionLogTest : public PartitionStreamTest {
 protected:
  // Appends batch number `n`: a put of "n" = n, and of one of 50 keys.
  static Result<uint64_t> AppendBatch(Owner& owner, int64_t n) {
    engine::CommitBatch batch;
    batch.AddPut("n", engine::CounterRecord{n, 0});
    batch.AddPut("key:" + std::to_string(n % 50), engine::CounterRecord{n, 0});
    owner.header.epoch = static_cast<uint64_t>(n);
    return PartitionStreamTest::AppendBatch(owner, batch);
  }

  // Reads the stream from `from` until `count` records came (at most 60 s). Creating the
  // reader's consumer needs JetStream's meta leader, which a cluster that has just got its
  // quorum back may still be electing: that is retried.
  std::vector<LogEntry> ReadAll(uint64_t from, size_t count) {
    std::vector<LogEntry> entries;
    const auto deadline = Clock::now() + 60s;
    auto reader = PartitionReader::Open(*connection_, kStream, kSubject, from);
    while (!reader && reader.error().code == ErrorCode::kUnavailable && Clock::now() < deadline) {
      std::this_thread::sleep_for(100ms);
      reader = PartitionReader::Open(*connection_, kStream, kSubject, from);
    }
    EXPECT_TRUE(reader) << reader.error().message;
    if (!reader) return entries;
    while (entries.size() < count && Clock::now() < deadline) {
      auto entry = (*reader)->Next(1s);
      EXPECT_TRUE(entry) << entry.error().message;
      if (!entry) break;
      if (entry->has_value()) entries.push_back(std::move(**entry));
    }
    return entries;
  }

  // Checks that the stream holds exactly the claim at `claim_seq` and then batches 0 ..
  // batches-1 of `owner`, each once and in order, all counting.
  void ExpectExactlyOnceInOrder(const Owner& owner, uint64_t claim_seq, int64_t batches) {
    auto state = connection_->GetStreamState(kStream);
    ASSERT_TRUE(state) << state.error().message;
    EXPECT_EQ(state->last_seq, claim_seq + static_cast<uint64_t>(batches));
    const std::vector<LogEntry> entries = ReadAll(claim_seq, static_cast<size_t>(batches) + 1);
    ASSERT_EQ(entries.size(), static_cast<size_t>(batches) + 1);
    EXPECT_EQ(entries[0].record.kind, RecordKind::kClaim);
    for (size_t i = 0; i < entries.size(); ++i) {
      const LogEntry& entry = entries[i];
      ASSERT_EQ(entry.kind, LogEntry::Kind::kRecord) << i;
      ASSERT_EQ(entry.seq, claim_seq + i);
      EXPECT_EQ(entry.msg_id, owner.log->MessageId(entry.seq));
      EXPECT_TRUE(entry.counts) << entry.seq;
      if (i == 0) continue;
      ASSERT_EQ(entry.record.kind, RecordKind::kBatch) << entry.seq;
      ASSERT_EQ(entry.record.batch.put_count(), 2u);
      ASSERT_EQ(entry.record.batch.put_record(0).value, static_cast<int64_t>(i) - 1)
          << "batch at " << entry.seq;
    }
  }

  // Waits (at most 60 s) until the owner's claim and `batches` batches appended since `start`
  // are durable with the log still writing, prints the figures under `what`, and returns them.
  static PartitionLogStats WaitAllDurable(const Owner& owner, int64_t batches,
                                          Clock::time_point start, const char* what) {
    const PartitionLogProgress progress = owner.log->WaitDurable(batches + 1, 60s);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_EQ(progress.durable_seq, static_cast<uint64_t>(batches) + 1);
    EXPECT_EQ(progress.state, PartitionLogState::kWriting);
    const PartitionLogStats stats = owner.log->stats();
    // Every record, whether its PubAck or a lookup after a refusal made it durable, was
    // acted on at once (see AnOutcomeThatComesWhileTheLogSendsIsActedOn).
    EXPECT_EQ(stats.late_durable, 0u);
    Print(what, stats, seconds);
    return stats;
  }

  static void Print(const char* what, const PartitionLogStats& s, double seconds) {
    std::printf(
        "[ figures  ] %s: %llu records durable in %.2f s (%.0f/s); sends %llu, resend rounds "
        "%llu, duplicates %llu, found by lookup %llu; failed sends: timeout %llu, no responders "
        "%llu, wrong last %llu, other %llu, not sent %llu; longest wait %lld ms\n",
        what, static_cast<unsigned long long>(s.durable), seconds, s.durable / seconds,
        static_cast<unsigned long long>(s.sends), static_cast<unsigned long long>(s.resend_rounds),
        static_cast<unsigned long long>(s.duplicates),
        static_cast<unsigned long long>(s.found_by_lookup),
        static_cast<unsigned long long>(s.timeouts),
        static_cast<unsigned long long>(s.no_responders),
        static_cast<unsigned long long>(s.wrong_last),
        static_cast<unsigned long long>(s.other_failures),
        static_cast<unsigned long long>(s.send_failures),
        static_cast<long long>(s.longest_wait_ms));
  }

  // The index of the server leading the test stream (-1 while there is none), as the
  // stream's state says.
  int LeaderIndex() {
    auto state = connection_->GetStreamState(kStream);
    return state ? cluster_->IndexOf(state->leader) : -1;
  }
};

TEST_F(PartitionLogTest, ChainedAsyncPublishingLandsEveryRecordOnceInOrder) {
  Owner owner = Claim(*connection_, 32, "a");
  ASSERT_TRUE(owner.log);
  constexpr int64_t kBatches = 3000;
  const auto start = Clock::now();
  for (int64_t n = 0; n < kBatches; ++n) ASSERT_TRUE(AppendBatch(owner, n));
  const PartitionLogStats stats = WaitAllDurable(owner, kBatches, start, "chained, 32 in flight");
  EXPECT_EQ(stats.durable, static_cast<uint64_t>(kBatches) + 1);
  EXPECT_EQ(stats.wrong_last, 0u);
  ExpectExactlyOnceInOrder(owner, 1, kBatches);

  auto oversized = owner.log->Append(RecordKind::kBatch, std::string(256 * 1024 + 1, 'x'));
  ASSERT_FALSE(oversized);
  EXPECT_EQ(oversized.error().code, ErrorCode::kInvalidArgument);
}

// An outcome that comes while the log's thread is still sending (it has let go of its lock)
// is acted on at once, not at the thread's next timed wake-up: the pause after each send
// makes every PubAck come then. Before the fix (wakeups_), each of these records became
// durable only at a timed wake-up, up to a second later.
TEST_F(PartitionLogTest, AnOutcomeThatComesWhileTheLogSendsIsActedOn) {
  Owner owner = Claim(*connection_, 4, "a", [] { std::this_thread::sleep_for(50ms); });
  ASSERT_TRUE(owner.log);
  ASSERT_EQ(owner.log->WaitDurable(1, 60s).durable_seq, 1u);
  constexpr int64_t kRecords = 20;
  for (int64_t n = 0; n < kRecords; ++n) {
    auto seq = AppendBatch(owner, n);
    ASSERT_TRUE(seq) << seq.error().message;
    ASSERT_EQ(owner.log->WaitDurable(*seq, 60s).durable_seq, *seq);
  }
  const PartitionLogStats stats = owner.log->stats();
  EXPECT_EQ(stats.durable, static_cast<uint64_t>(kRecords) + 1);
  EXPECT_EQ(stats.late_durable, 0u);
}

// A stale writer is refused at its first record after another's claim, and none of the
// records it had in flight behind that one lands; the new owner writes on.
TEST_F(PartitionLogTest, FencedStaleWriterWritesNothing) {
  Owner a = Claim(*connection_, 8, "a");
  ASSERT_TRUE(a.log);
  ASSERT_TRUE(AppendBatch(a, 0));
  ASSERT_EQ(a.log->WaitDurable(2, 10s).durable_seq, 2u);

  auto other = cluster_->Connect();
  ASSERT_TRUE(other) << other.error().message;
  Owner b = Claim(**other, 8, "b");
  ASSERT_TRUE(b.log);
  ASSERT_EQ(b.log->WaitDurable(3, 10s).durable_seq, 3u);

  for (int64_t n = 1; n <= 6; ++n) ASSERT_TRUE(AppendBatch(a, n));
  const PartitionLogProgress fenced = a.log->WaitDurable(8, 20s);
  EXPECT_EQ(fenced.state, PartitionLogState::kFenced);
  EXPECT_EQ(fenced.durable_seq, 2u);
  const std::optional<FenceInfo> fence = a.log->fence();
  ASSERT_TRUE(fence.has_value());
  EXPECT_EQ(fence->seq, 3u);
  EXPECT_EQ(fence->found_msg_id, b.log->MessageId(3));
  auto refused = AppendBatch(a, 7);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  const PartitionLogStats stats = a.log->stats();
  Print("stale writer", stats, 1);
  a.log.reset();  // waits for the outcomes of everything it had sent

  // B goes on; the stream holds A's claim and batch, B's claim, B's batch: nothing else.
  ASSERT_TRUE(AppendBatch(b, 100));
  EXPECT_EQ(b.log->WaitDurable(4, 10s).durable_seq, 4u);
  auto state = connection_->GetStreamState(kStream);
  ASSERT_TRUE(state);
  EXPECT_EQ(state->last_seq, 4u);
  const std::vector<LogEntry> entries = ReadAll(1, 4);
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[2].record.kind, RecordKind::kClaim);
  EXPECT_EQ(entries[2].record.claim.node_name, "b");
  EXPECT_EQ(entries[3].record.batch.put_record(0).value, 100);
  for (const LogEntry& entry : entries) EXPECT_TRUE(entry.counts) << entry.seq;
}

// kill -9 of the server leading the stream while a writer appends: publishes time out or
// find no responders until the two others elect a leader (4-9 s in nats-server 2.9.10);
// the log resends from its head, and in the end every record is in the stream once, in
// order.
TEST_F(PartitionLogTest, LeaderKillDuringPublishingKeepsEveryRecordOnceInOrder) {
  Owner owner = Claim(*connection_, 16, "a");
  ASSERT_TRUE(owner.log);
  ASSERT_EQ(owner.log->WaitDurable(1, 10s).durable_seq, 1u);
  const int leader = LeaderIndex();
  ASSERT_GE(leader, 0);
  constexpr int64_t kBatches = 3000;
  const auto start = Clock::now();
  Clock::time_point killed;
  for (int64_t n = 0; n < kBatches; ++n) {
    ASSERT_TRUE(AppendBatch(owner, n));
    if (n == 500) {
      cluster_->Kill(leader);
      killed = Clock::now();
    }
    std::this_thread::sleep_for(2ms);
  }
  const PartitionLogStats stats = WaitAllDurable(owner, kBatches, start, "leader killed");
  std::printf("[ figures  ] leader %s killed %.2f s after the start; new leader %s\n",
              cluster_->name(leader).c_str(), std::chrono::duration<double>(killed - start).count(),
              cluster_->name(LeaderIndex()).c_str());
  EXPECT_GT(stats.timeouts + stats.no_responders + stats.other_failures, 0u)
      << "the kill went unnoticed";
  ExpectExactlyOnceInOrder(owner, 1, kBatches);
  ASSERT_TRUE(cluster_->Restart(leader));
}

// Two of three servers killed: no record becomes durable while quorum is lost (the
// publishes time out — unknown — or find no leader), the log says it is stalled; one
// server back, and every record lands once, in order.
TEST_F(PartitionLogTest, QuorumLossIsNeverAcknowledgedAndWritesResume) {
  Owner owner = Claim(*connection_, 4, "a");
  ASSERT_TRUE(owner.log);
  for (int64_t n = 0; n < 20; ++n) ASSERT_TRUE(AppendBatch(owner, n));
  const auto before_last = Clock::now();
  ASSERT_TRUE(AppendBatch(owner, 20));
  ASSERT_EQ(owner.log->WaitDurable(22, 20s).durable_seq, 22u);
  // The owner's read lease counts from the first send of its newest durable record.
  const Clock::time_point lease_from = owner.log->progress().durable_sent_at;
  EXPECT_GE(lease_from, before_last);
  EXPECT_LE(lease_from, Clock::now());
  const int leader = LeaderIndex();
  ASSERT_GE(leader, 0);
  std::vector<int> killed;
  for (int i = 0; i < cluster_->size(); ++i) {
    if (i != leader) killed.push_back(i);
  }
  for (const int i : killed) cluster_->Kill(i);
  const auto start = Clock::now();

  // 4 s without quorum, a record appended every 200 ms: none may become durable.
  int64_t n = 21;
  bool stalled = false;
  for (int step = 0; step < 20; ++step, ++n) {
    ASSERT_TRUE(AppendBatch(owner, n));
    std::this_thread::sleep_for(200ms);
    const PartitionLogProgress progress = owner.log->progress();
    ASSERT_EQ(progress.durable_seq, 22u) << "a record was acknowledged without a quorum";
    ASSERT_EQ(progress.durable_sent_at, lease_from) << "the lease grew without a durable record";
    stalled = stalled || progress.state == PartitionLogState::kStalled;
  }
  EXPECT_TRUE(stalled);
  const PartitionLogStats during = owner.log->stats();
  EXPECT_GT(during.timeouts + during.no_responders, 0u);

  ASSERT_TRUE(cluster_->Restart(killed[0]));
  const auto restarted = Clock::now();
  const PartitionLogProgress progress = owner.log->WaitDurable(n + 1, 60s);
  const auto resumed = Clock::now();
  EXPECT_EQ(progress.durable_seq, static_cast<uint64_t>(n) + 1);
  EXPECT_EQ(progress.state, PartitionLogState::kWriting);
  EXPECT_GT(progress.durable_sent_at, start);  // the last record was first sent meanwhile
  const PartitionLogStats stats = owner.log->stats();
  EXPECT_EQ(stats.late_durable, 0u);
  Print("quorum lost, then back", stats, std::chrono::duration<double>(resumed - start).count());
  std::printf(
      "[ figures  ] quorum lost for %.2f s; every record durable %.2f s after a "
      "server came back\n",
      std::chrono::duration<double>(restarted - start).count(),
      std::chrono::duration<double>(resumed - restarted).count());
  ExpectExactlyOnceInOrder(owner, 1, n);
  ASSERT_TRUE(cluster_->Restart(killed[1]));
}

// JetStream starts a consumer asked for a purged sequence at the first one it holds,
// silently: the reader reports the missing range.
TEST_F(PartitionLogTest, ReaderReportsPurgedRangesAsGaps) {
  Owner owner = Claim(*connection_, 4, "a");
  ASSERT_TRUE(owner.log);
  for (int64_t n = 0; n < 9; ++n) ASSERT_TRUE(AppendBatch(owner, n));
  ASSERT_EQ(owner.log->WaitDurable(10, 20s).durable_seq, 10u);
  ASSERT_TRUE(connection_->PurgeStream(kStream, 6));

  std::vector<LogEntry> entries = ReadAll(1, 6);
  ASSERT_EQ(entries.size(), 6u);
  EXPECT_EQ(entries[0].kind, LogEntry::Kind::kGap);
  EXPECT_EQ(entries[0].seq, 1u);
  EXPECT_EQ(entries[0].gap_end, 6u);
  for (size_t i = 1; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].kind, LogEntry::Kind::kRecord);
    EXPECT_EQ(entries[i].seq, 5 + i);
    EXPECT_EQ(entries[i].record.batch.put_record(0).value, static_cast<int64_t>(3 + i));
    // The claim at 1 was purged: without the ownership in force, nothing counts.
    EXPECT_FALSE(entries[i].counts);
  }
  // From a saved position with its ownership: no gap, and the records count.
  auto reader = PartitionReader::Open(*connection_, kStream, kSubject, 8,
                                      OwnershipFilter(owner.header.term, owner.header.writer));
  ASSERT_TRUE(reader) << reader.error().message;
  auto entry = (*reader)->Next(10s);
  ASSERT_TRUE(entry && entry->has_value());
  EXPECT_EQ((*entry)->kind, LogEntry::Kind::kRecord);
  EXPECT_EQ((*entry)->seq, 8u);
  EXPECT_TRUE((*entry)->counts);

  // Everything purged: the gap is reported although no record follows it.
  ASSERT_TRUE(connection_->PurgeStream(kStream, 11));
  reader = PartitionReader::Open(*connection_, kStream, kSubject, 3);
  ASSERT_TRUE(reader) << reader.error().message;
  entry = (*reader)->Next(5s);
  ASSERT_TRUE(entry && entry->has_value());
  EXPECT_EQ((*entry)->kind, LogEntry::Kind::kGap);
  EXPECT_EQ((*entry)->gap_end, 11u);
  entry = (*reader)->Next(300ms);
  ASSERT_TRUE(entry);
  EXPECT_FALSE(entry->has_value());
  EXPECT_EQ((*reader)->next_seq(), 11u);

  // A stream that ends before what a reader has read is refused.
  auto ahead = PartitionReader::Open(*connection_, kStream, kSubject, 12);
  ASSERT_FALSE(ahead);
  EXPECT_EQ(ahead.error().code, ErrorCode::kCorruption);
}

}  // namespace
}  // namespace tally::cluster
