// ClusterSourceTarget: where a PostgreSQL source's writes go on a cluster's consumer node —
// the cluster's change stream (change_feed.h has the messages), which every partition owner
// applies to its partitions, and every node to its catalog.
//
// What each write becomes:
//   ApplyTransaction   "source" messages: the transaction's rows (derived/change_writer.h),
//                      cut into parts of at most max_body_bytes and at each TRUNCATE (a
//                      "truncate" message); one with no rows is a "source-at"; one at
//                      position 0 (a backfill chunk) "rows" messages.
//   ApplyBackfill      "rows" messages for one counter.
//   ResetSource, ResetCounter, ActivateCounter, FinishBackfill, MarkEverySourceStreamed
//                      "source-reset", "counter-reset", "activate", "finish", "sourced":
//                      answered once this node has run them (AwaitCatalog), so that what
//                      the source reads next of the catalog shows them.
// A write is durable once the stream took it (a quorum of its servers): WaitDurable has
// nothing to wait for. Each message carries the consumer's claim; a transaction's parts
// have the Nats-Msg-Id "src:<claim>:<lsn>:<part>", so that a part sent again (a session
// that starts over from the slot's confirmed position) is stored once.
//
// BeginSession takes the replication slot over from a consumer this one replaced (its
// walsender is terminated: the slot admits one reader, and the old consumer must not
// confirm anything more), catches up with the change stream (the positions read next are
// then the cluster's), and resets every counter whose backfill a replaced consumer left
// unfinished (it is redone).
//
// Verification holds are not offered in a cluster (tally verify runs against one node):
// hold_state() is never held.
//
// Threads: the source's thread.
#pragma once

#include <cstdint>
#include <string>

#include "cluster/change_feed.h"
#include "sources/postgres/source_target.h"

namespace tally::cluster {

class ClusterSourceTarget final : public postgres::SourceTarget {
 public:
  // `claim`: this consumer's term as partition 0's owner. `slot`: the replication slot.
  // REQUIRES: `feed` and `derived` outlive this object.
  ClusterSourceTarget(ChangeFeed& feed, derived::DerivedCounters& derived, std::string slot,
                      int64_t claim, size_t max_body_bytes = 256 * 1024);

  Status BeginSession(pg_conn* sql) override;
  Status MarkEverySourceStreamed() override;
  int64_t SourcePosition(std::string_view source) override;
  Result<derived::PushOutcome> ApplyTransaction(
      std::span<const derived::SourceTransactionPart> parts, int64_t position) override;
  Status ResetSource(std::string_view source) override;
  Result<bool> ActivateCounter(std::string_view name, int64_t position) override;
  Result<derived::PushOutcome> ApplyBackfill(
      std::string_view counter, std::span<const derived::SourceRowChange> rows) override;
  Status FinishBackfill(std::string_view name) override;
  Status ResetCounter(std::string_view name) override;
  void WaitDurable(uint64_t) override {}
  derived::HoldState hold_state() const override { return {}; }
  void MarkStreamAt(int64_t) override {}
  void Release() override {}

 private:
  // Publishes a message whose catalog part every node runs, and waits until this node ran it.
  Status PublishCatalog(const std::string& head);
  // Publishes `rows` of `source` as "rows" messages for `counter` ("-": every counter).
  Result<derived::PushOutcome> PublishRows(std::string_view source, std::string_view counter,
                                           std::span<const derived::SourceRowChange> rows);
  // A Nats-Msg-Id used once by this consumer.
  std::string NextId(std::string_view kind);

  ChangeFeed& feed_;
  derived::DerivedCounters& derived_;
  const std::string slot_;
  const int64_t claim_;
  const size_t max_body_bytes_;
  const int64_t nonce_;  // this target's start, in the ids of its messages
  uint64_t next_id_ = 0;
};

}  // namespace tally::cluster
