// ClusterSourceTarget: where a PostgreSQL source's writes go on a cluster's consumer node —
// the cluster's change stream (change_feed.h has the messages), which every partition owner
// applies to its partitions, and every node to its catalog.
//
// What each write becomes:
//   ApplyTransaction   segments of a "batch" message: the transaction's rows
//                      (derived/change_writer.h), cut into parts of max_body_bytes of its
//                      own and at each TRUNCATE (a segment of its own): the same cuts
//                      whoever sends it; one with no rows moves positions alone.
//                      Transactions gather in the batch until it holds max_body_bytes
//                      (published between parts: at most about twice that), or until the
//                      source waits for them to be
//                      durable (WaitDurable: the stream has nothing more to send for now,
//                      or an acknowledgement is due); then it is published, and its epoch
//                      (the batch's number) is durable once the stream took it. One at a
//                      time: the consumer's messages are a gapless run in LSN order.
//                      One at position 0 (a backfill chunk): "rows" messages.
//   ApplyBackfill      "rows" messages for one counter.
//   ResetSource, ResetCounter, ActivateCounter, FinishBackfill, MarkEverySourceStreamed
//                      "source-reset", "counter-reset", "activate", "finish", "sourced":
//                      answered once this node has run them (AwaitCatalog), so that what
//                      the source reads next of the catalog shows them.
// Anything else flushes the batch first, so the stream holds the writes in their order.
// Message ids are unique per consumer; a transaction sent again (a session that starts over
// from the slot's confirmed position, a batch published again after a failure) counts once
// behind the partitions' fences (change_feed.h).
//
// BeginSession takes the replication slot over from a consumer this one replaced (its
// walsender is terminated: the slot admits one reader, and the old consumer must not
// confirm anything more), catches up with the change stream (the positions read next are
// then the cluster's), and resets every counter whose backfill a replaced consumer left
// unfinished (it is redone).
//
// Verification holds (tally verify) are the change stream's (ChangeFeed::hold(), set through
// the stream by any node): a transaction above the held position flushes the batch, puts a
// "reached" marker in the stream (once per hold) and waits for the hold to be released or
// moved; so does a stream reported at or past the position (MarkStreamAt) without the wait.
// Stopping while held (Release, from PostgresSource::Stop) ends the wait with an error rather
// than let the transaction through: the hold stands for the next consumer.
//
// Threads: the source's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

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
  Status WaitDurable(uint64_t epoch) override;
  void AddDurableListener(std::function<void(uint64_t)> listener) override;
  uint64_t durable_epoch() const override;
  derived::HoldState hold_state() const override;
  void MarkStreamAt(int64_t position) override;
  void Release() override;

 private:
  // Publishes a message whose catalog part every node runs, and waits until this node ran it.
  Status PublishCatalog(const std::string& head);
  // Publishes `rows` of `source` as "rows" messages for `counter` ("-": every counter).
  Result<derived::PushOutcome> PublishRows(std::string_view source, std::string_view counter,
                                           std::span<const derived::SourceRowChange> rows);
  // Publishes the batch, if anything is in it.
  Status Flush();
  // Flushes the batch and puts the "reached" marker of `hold` in the stream, unless done.
  Status MarkReached(const StreamHold& hold);
  // Returns once no hold below `position` stands; an error when the source stops meanwhile
  // or the marker cannot be published.
  Status WaitForHold(int64_t position);
  // The epoch of the batch being filled: the one after the last published.
  uint64_t open_epoch() const;
  // A Nats-Msg-Id used once by this consumer.
  std::string NextId(std::string_view kind);

  ChangeFeed& feed_;
  derived::DerivedCounters& derived_;
  const std::string slot_;
  const int64_t claim_;
  const size_t max_body_bytes_;
  const int64_t nonce_;  // this target's start, in the ids of its messages
  uint64_t next_id_ = 0;
  std::string batch_;  // segments not published yet (cluster/source_batch.h)
  // The hold (its sequence) whose "reached" this consumer published; read by hold_state().
  std::atomic<uint64_t> reached_hold_{0};
  std::atomic<bool> stopping_{false};  // Release(): the source stops

  mutable std::mutex mutex_;  // guards what follows (listeners may read from any thread)
  uint64_t durable_ = 0;      // the last epoch published
  std::vector<std::function<void(uint64_t)>> listeners_;
};

}  // namespace tally::cluster
