// SourceRunner: a cluster's PostgreSQL source (tallyd --source on the nodes of a cluster)
// runs on one node at a time, the owner of partition 0. Every node that is given --source
// runs a SourceRunner; the one whose partition 0 is owned runs a PostgresSource writing to
// the change stream (ClusterSourceTarget) with its term as the claim, and stops it as soon
// as it no longer owns the partition. A node that takes partition 0 over (a failover, a
// hand-over) starts its own consumer, which takes the slot over (BeginSession) and resumes
// from the slot's confirmed position; the fences of the change stream (change_feed.h) make
// what a replaced consumer still sends count nowhere twice.
//
// Errors of the source that trying again cannot fix (a bad connection string, a table
// without REPLICA IDENTITY FULL) stop neither the node nor the runner: they are logged and
// reported, and the consumer is started again every few seconds.
//
// Threads: Start and Stop from the node's thread; Report from any. The runner's own thread
// starts and stops the consumer.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cluster/change_feed.h"
#include "cluster/cluster_persistence.h"
#include "cluster/source_target.h"
#include "core/status_report.h"
#include "sources/postgres/postgres_source.h"

namespace tally::cluster {

class SourceRunner {
 public:
  // REQUIRES: everything referenced outlives the runner.
  SourceRunner(ClusterPersistence& persistence, ChangeFeed& feed, engine::Engine& engine,
               derived::DerivedCounters& derived, postgres::PostgresSourceOptions options);
  ~SourceRunner();  // Stop()s.
  SourceRunner(const SourceRunner&) = delete;
  SourceRunner& operator=(const SourceRunner&) = delete;

  void Start();
  // Stops the consumer, if it runs here, and the runner. Idempotent.
  void Stop();

  // The consumer's figures (PostgresSource::Report) with "consumer" = "this node" where it
  // runs; elsewhere state "elsewhere" and the consumer as the stream says (partition 0's
  // owner).
  StatusReport Report() const;
  // The consumer's figures (PostgresSource::stats) where it runs; where this node owns
  // partition 0 but its consumer could not start, state "failed" and the error; elsewhere
  // nullopt. For the metrics and GET /readyz.
  std::optional<postgres::PostgresSource::Stats> ConsumerStats() const;

 private:
  void Run();
  // Starts a consumer with `claim`, or stops the one running; under no lock.
  void StartConsumer(int64_t claim);
  void StopConsumer();

  ClusterPersistence& persistence_;
  ChangeFeed& feed_;
  engine::Engine& engine_;
  derived::DerivedCounters& derived_;
  const postgres::PostgresSourceOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  // The consumer, while this node owns partition 0 (the runner's thread writes them, under
  // mutex_; Report reads them under it).
  std::unique_ptr<ClusterSourceTarget> target_;
  std::unique_ptr<postgres::PostgresSource> source_;
  int64_t claim_ = 0;
  std::string last_error_;  // why the last consumer did not start
  std::thread thread_;
};

}  // namespace tally::cluster
