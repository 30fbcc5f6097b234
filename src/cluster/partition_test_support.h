// The fixture of the tests that read and write one partition's stream against three real
// nats-servers (partition_log_test.cc, follower_test.cc): each test starts its own servers
// and an R3 stream TALLY_P0, and owners claim it and append records; and StartWithStream,
// which nats_client_test.cc shares. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "cluster/nats_test_cluster.h"
#include "cluster/partition_log.h"
#include "cluster/record_codec.h"
#include "engine/commit_batch.h"

namespace tally::cluster {

inline constexpr char kStream[] = "TALLY_P0";
inline constexpr char kSubject[] = "tally.p.0";

// The writer side of one owner in the tests: its log, and the header of its records.
struct Owner {
  std::unique_ptr<PartitionLog> log;
  RecordHeader header;
};

// Starts three nats-servers, connects to them and ensures the stream of `config`.
inline void StartWithStream(const StreamConfig& config, std::unique_ptr<NatsTestCluster>* cluster,
                            std::unique_ptr<NatsConnection>* connection) {
  auto started = NatsTestCluster::Start();
  ASSERT_TRUE(started) << started.error().message;
  *cluster = std::move(*started);
  auto connected = (*cluster)->Connect();
  ASSERT_TRUE(connected) << connected.error().message;
  *connection = std::move(*connected);
  auto state = NatsTestCluster::EnsureStream(**connection, config);
  ASSERT_TRUE(state) << state.error().message;
}

class PartitionStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StreamConfig config;
    config.name = kStream;
    config.subjects = {kSubject};
    StartWithStream(config, &cluster_, &connection_);
  }

  static PartitionLogOptions Options(size_t in_flight) {
    PartitionLogOptions options;
    options.stream = kStream;
    options.subject = kSubject;
    options.max_in_flight = in_flight;
    return options;
  }

  // Starts a writer at the stream's tail and appends its claim; the claim is not awaited.
  // `after_send`: PartitionLogOptions::after_send.
  Owner Claim(NatsConnection& connection, size_t in_flight, const std::string& node,
              std::function<void()> after_send = {}) {
    Owner owner;
    auto state = connection.GetStreamState(kStream);
    EXPECT_TRUE(state) << state.error().message;
    const uint64_t tail = state ? state->last_seq : 0;
    owner.header.writer = NewWriterId();
    owner.header.term = tail + 1;
    PartitionLogOptions options = Options(in_flight);
    options.after_send = std::move(after_send);
    auto log = PartitionLog::Start(connection, std::move(options), tail, owner.header.writer);
    EXPECT_TRUE(log) << log.error().message;
    if (!log) return owner;
    owner.log = std::move(*log);
    std::string claim;
    ClaimBody body;
    body.node_name = node;
    body.caught_up_to = tail;
    EncodeClaim(owner.header, body, &claim);
    auto seq = owner.log->Append(RecordKind::kClaim, claim);
    EXPECT_TRUE(seq && *seq == tail + 1);
    return owner;
  }

  // Appends `batch` whole as one record of `kind` (kBatch, or kPart of a group) with the
  // owner's header; returns the sequence it will land at.
  static Result<uint64_t> AppendBatch(Owner& owner, const engine::CommitBatch& batch,
                                      RecordKind kind = RecordKind::kBatch) {
    std::string bytes;
    EncodeBatch(owner.header, batch, BatchShare::All(batch), &bytes, kind);
    return owner.log->Append(kind, std::move(bytes));
  }

  std::unique_ptr<NatsTestCluster> cluster_;
  std::unique_ptr<NatsConnection> connection_;
};

}  // namespace tally::cluster
