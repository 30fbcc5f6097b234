// cluster_log_bench: what the replication primitive (cluster/partition_log.h) sustains with
// realistic commits, to choose the partition count P and the in-flight depth.
//
// It starts three nats-servers on loopback (JetStream clustered, NatsTestCluster), creates
// P R3 streams, and plays one owner of every partition: each commit is a CommitBatch of
// `keys` final values (random keys, or one hot key coalesced to one put, as the engine's
// keyspace drains an epoch), split by slot into per-partition shares (SplitBatch), each
// share encoded and appended to its partition's log. A commit is acknowledged when every
// share is durable. The owner keeps at most `depth` commits outstanding (the committer's
// pipeline); each log keeps at most `inflight` records in flight.
//
// Printed per row: commits/s, changed keys/s, NATS messages/s, the commit latency (append
// to every share durable) p50/p99, the CPU of the three nats-servers and of this process
// per changed key and per message (utime + stime from /proc), and "led here": how many of
// the P streams the server this process is connected to leads (nats.c picks the server at
// random, and each stream's leader is elected, so it varies from run to run).
//
//   build/bin/cluster_log_bench                     the sweep (P x in-flight x batch shape)
//   build/bin/cluster_log_bench 12 4 100 2          one row: P, in-flight, keys (0 = hot), seconds
//   build/bin/cluster_log_bench 1 1 0 5 buffered    the same with nats.c's buffered publishing
//                                                   (ConnectOptions::send_asap false), to compare
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/nats_test_cluster.h"
#include "cluster/partition_log.h"
#include "cluster/record_codec.h"

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  uint32_t partitions = 12;
  size_t in_flight = 4;
  size_t keys = 100;  // changed keys per commit; 0 = one hot key
  double seconds = 3;
};

// utime + stime of a process, in seconds (0 when it is gone).
double CpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t end = line.rfind(')');
  if (end == std::string::npos) return 0;
  // Fields after the command: state is field 3; utime and stime are fields 14 and 15.
  std::vector<std::string> fields;
  size_t position = end + 2;
  while (position < line.size() && fields.size() < 13) {
    const size_t next = line.find(' ', position);
    fields.push_back(line.substr(position, next - position));
    if (next == std::string::npos) break;
    position = next + 1;
  }
  if (fields.size() < 13) return 0;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
}

double ServersCpu(const NatsTestCluster& cluster) {
  double total = 0;
  for (int i = 0; i < cluster.size(); ++i) total += CpuSeconds(cluster.pid(i));
  return total;
}

std::string StreamName(uint32_t p) { return "BENCH_P" + std::to_string(p); }
std::string Subject(uint32_t p) { return "bench.p." + std::to_string(p); }

// One commit waiting for its shares: the sequence each partition's share will land at
// (0 = no share in that partition).
struct Pending {
  Clock::time_point appended;
  std::vector<uint64_t> seqs;
};

// How many of the first `partitions` streams the server this connection is on leads. A
// record published to its stream's leader skips a hop between servers each way: with one
// record in flight, about a fifth less nats-server CPU a record (docs/benchmarks.md).
uint32_t StreamsLedWhereConnected(NatsTestCluster& cluster, NatsConnection& connection,
                                  uint32_t partitions) {
  const std::string url = connection.connected_url();
  uint32_t led = 0;
  for (uint32_t p = 0; p < partitions; ++p) {
    auto state = connection.GetStreamState(StreamName(p));
    if (!state) continue;
    const int index = cluster.IndexOf(state->leader);
    if (index >= 0 && cluster.url(index) == url) ++led;
  }
  return led;
}

bool RunRow(NatsTestCluster& cluster, NatsConnection& connection, const Row& row, int round) {
  std::vector<std::unique_ptr<PartitionLog>> logs;
  std::vector<RecordHeader> headers(row.partitions);
  for (uint32_t p = 0; p < row.partitions; ++p) {
    StreamConfig config;
    config.name = StreamName(p);
    config.subjects = {Subject(p)};
    auto state = NatsTestCluster::EnsureStream(connection, config);
    if (!state) {
      std::fprintf(stderr, "stream %s: %s\n", config.name.c_str(), state.error().message.c_str());
      return false;
    }
    PartitionLogOptions options;
    options.stream = config.name;
    options.subject = config.subjects[0];
    options.partition = p;
    options.max_in_flight = row.in_flight;
    headers[p].partition = p;
    headers[p].term = state->last_seq + 1;
    headers[p].writer = NewWriterId();
    auto log = PartitionLog::Start(connection, options, state->last_seq, headers[p].writer);
    if (!log) {
      std::fprintf(stderr, "log %u: %s\n", p, log.error().message.c_str());
      return false;
    }
    logs.push_back(std::move(*log));
  }

  std::mt19937_64 random(static_cast<uint64_t>(round) * 7919 + row.partitions);
  const size_t depth = row.in_flight;  // commits outstanding: one record each per partition
  std::deque<Pending> pending;
  std::vector<double> latencies_ms;
  uint64_t commits = 0, keys = 0, messages = 0, bytes = 0;
  engine::CommitBatch batch;
  std::string record;
  int64_t hot = 0;

  const double cpu_servers_before = ServersCpu(cluster);
  const double cpu_self_before = CpuSeconds(getpid());
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(row.seconds));
  // Waits for the oldest commit: every share durable (bounded: 30 s per share).
  auto settle_oldest = [&]() -> bool {
    const Pending& oldest = pending.front();
    for (uint32_t p = 0; p < row.partitions; ++p) {
      if (oldest.seqs[p] == 0) continue;
      const PartitionLogProgress progress =
          logs[p]->WaitDurable(oldest.seqs[p], std::chrono::seconds(30));
      if (progress.durable_seq < oldest.seqs[p]) {
        std::fprintf(stderr, "partition %u: %s at %" PRIu64 " waiting for %" PRIu64 "\n", p,
                     std::string(PartitionLogStateName(progress.state)).c_str(),
                     progress.durable_seq, oldest.seqs[p]);
        return false;
      }
    }
    latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - oldest.appended).count());
    pending.pop_front();
    return true;
  };

  while (Clock::now() < end) {
    batch.Clear();
    batch.set_epoch(commits + 1);
    if (row.keys == 0) {
      batch.AddPut("bench:hot", engine::CounterRecord{++hot, 0});
    } else {
      for (size_t k = 0; k < row.keys; ++k) {
        const uint64_t n = random() % 1'000'000;
        batch.AddPut("bench:r:" + std::to_string(n),
                     engine::CounterRecord{static_cast<int64_t>(random() % 1000), 0});
      }
    }
    const std::vector<BatchShare> shares = SplitBatch(batch, row.partitions);
    Pending commit{Clock::now(), std::vector<uint64_t>(row.partitions, 0)};
    for (uint32_t p = 0; p < row.partitions; ++p) {
      if (shares[p].empty()) continue;
      headers[p].epoch = commits + 1;
      EncodeBatch(headers[p], batch, shares[p], &record);
      bytes += record.size();
      auto seq = logs[p]->Append(RecordKind::kBatch, record);
      if (!seq) {
        std::fprintf(stderr, "append: %s\n", seq.error().message.c_str());
        return false;
      }
      commit.seqs[p] = *seq;
      ++messages;
    }
    pending.push_back(std::move(commit));
    ++commits;
    keys += std::max<size_t>(row.keys, 1);
    while (pending.size() > depth) {
      if (!settle_oldest()) return false;
    }
  }
  while (!pending.empty()) {
    if (!settle_oldest()) return false;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_servers = ServersCpu(cluster) - cpu_servers_before;
  const double cpu_self = CpuSeconds(getpid()) - cpu_self_before;

  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto percentile = [&](double q) {
    if (latencies_ms.empty()) return 0.0;
    return latencies_ms[std::min(
        latencies_ms.size() - 1,
        static_cast<size_t>(q * static_cast<double>(latencies_ms.size())))];
  };
  uint64_t resends = 0;
  for (const auto& log : logs) resends += log->stats().resend_rounds;
  const uint32_t led = StreamsLedWhereConnected(cluster, connection, row.partitions);
  std::printf(
      "| %3u | %2zu | %5s | %8.0f | %10.0f | %7.0f | %7.0f | %6.2f | %6.2f | %7.2f | %6.1f | "
      "%6.1f | %5.0f | %" PRIu64 " | %u |\n",
      row.partitions, row.in_flight, row.keys == 0 ? "hot" : std::to_string(row.keys).c_str(),
      commits / seconds, keys / seconds, messages / seconds, bytes / seconds / 1024,
      percentile(0.5), percentile(0.99), 1e6 * cpu_servers / static_cast<double>(keys),
      1e6 * cpu_servers / static_cast<double>(messages),
      1e6 * cpu_self / static_cast<double>(messages), 100 * (cpu_servers + cpu_self) / seconds,
      resends, led);
  std::fflush(stdout);
  logs.clear();
  for (uint32_t p = 0; p < row.partitions; ++p) {
    if (auto deleted = connection.DeleteStream(StreamName(p)); !deleted) {
      std::fprintf(stderr, "delete %s: %s\n", StreamName(p).c_str(),
                   deleted.error().message.c_str());
    }
  }
  return true;
}

int Main(int argc, char** argv) {
  std::vector<Row> rows;
  ConnectOptions connect;
  if (argc == 6 && std::string_view(argv[5]) == "buffered") {
    connect.send_asap = false;
    --argc;
  }
  if (argc == 5) {
    rows.push_back(Row{static_cast<uint32_t>(std::atoi(argv[1])),
                       static_cast<size_t>(std::atoi(argv[2])),
                       static_cast<size_t>(std::atoi(argv[3])), std::atof(argv[4])});
  } else if (argc == 1) {
    for (const size_t keys : {size_t{0}, size_t{100}, size_t{1000}}) {
      for (const uint32_t partitions : {3u, 6u, 12u, 24u})
        rows.push_back(Row{partitions, 4, keys, 3});
      for (const size_t in_flight : {size_t{1}, size_t{16}})
        rows.push_back(Row{12, in_flight, keys, 3});
    }
  } else {
    std::fprintf(stderr, "usage: %s [partitions in-flight keys(0 = hot) seconds [buffered]]\n",
                 argv[0]);
    return 2;
  }
  auto cluster = NatsTestCluster::Start();
  if (!cluster) {
    std::fprintf(stderr, "nats-servers: %s\n", cluster.error().message.c_str());
    return 1;
  }
  auto connection = (*cluster)->Connect(std::move(connect));
  if (!connection) {
    std::fprintf(stderr, "connect: %s\n", connection.error().message.c_str());
    return 1;
  }
  std::printf(
      "|   P | in-flight | keys/commit | commits/s | keys/s | msgs/s | KB/s | p50 ms | p99 ms "
      "| nats µs CPU/key | nats µs CPU/msg | owner µs CPU/msg | CPU %% | resends | led here |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
      "|\n");
  int round = 0;
  for (const Row& row : rows) {
    if (!RunRow(**cluster, **connection, row, round++)) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tally::cluster

int main(int argc, char** argv) { return tally::cluster::Main(argc, argv); }
