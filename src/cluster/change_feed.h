// ChangeFeed: the derived counters on a cluster node (issue 13; docs/cluster.md).
//
// The cluster's change stream <NAME>_CHANGES (3 replicas; its de-duplication window is the
// idempotency window) holds, in one order, every definition script and every push:
//   "tally-change 1 ddl\n<script>"
//   "tally-change 1 push <only_counter>\n<body>"    (only_counter empty: every counter)
// Every node reads all of it, in order, on a thread of its own:
//   - A script runs on every node at its place in the stream (DerivedCounters::ExecuteAt at
//     its sequence): every node's catalog is the same at every point of the stream, and a
//     counter created at sequence S counts the pushes after S only. How far the node got is
//     the catalog record "cluster/ddl" (a script run again after a crash changes nothing:
//     CREATE of what exists is a no-op, DROP of what is gone an error that is logged).
//   - A push is applied by each partition's owner to its partition alone
//     (DerivedCounters::ApplyShares), with the partition's position record
//     "\0pos:{<tag>}changes" (PartitionTag: a key of the partition) set to the push's
//     sequence in the same View, so that the owner's commit puts both in the partition's
//     stream in one record: exactly once per partition, across failovers — a new owner has
//     the record from the stream it read, and the feed reads the change stream again from
//     the lowest position of the partitions it owns.
// A PostgreSQL source (--source) in a cluster is consumed by one node at a time, the owner
// of partition 0 (cluster/source_runner.h), whose PostgresSource writes to the stream
// through ClusterSourceTarget (cluster/source_target.h). Its messages carry its claim (its
// term as partition 0's owner):
//   "tally-change 1 batch <claim>\n<segments>"   transactions in order, a segment each
//        (their rows, a TRUNCATE, or positions alone: cluster/source_batch.h)
//   "tally-change 1 rows <claim> <source> <counter>\n<rows>"         a backfill chunk
//        (<counter> "-": every counter of the source that is not pending)
//   "tally-change 1 source-reset <claim> <source>"   a backfill starts over: its groups go
//   "tally-change 1 counter-reset <claim> <counter>" one counter's backfill starts over
//   "tally-change 1 activate <claim> <counter> <lsn>" / "finish <claim> <counter>"
//   "tally-change 1 sourced <claim>"                  counters created from here on are
//        pending until the consumer backfills them (DerivedCounters::MarkEverySourceStreamed)
// tally verify's hold and repair (change_feed_verify.cc), sent by any node:
//   "tally-change 1 hold <position> <replace>"   the verification hold set at a source position
//        (replace 1: moved there from where it stood); refused, on every node alike, when one
//        stands and replace is 0
//   "tally-change 1 release"                     it ends
//   "tally-change 1 reached <claim> <hold seq>"  from the consumer: everything up to the hold's
//        position is in the stream before this; each owner marks it in its partitions (their
//        position records), so that a node sees the hold reached once all its partitions are there
//   "tally-change 1 repair <counter>\n<groups>"  groups set to values, each by its partition's
//        owner; a group is "<key length> <value> <key>\n"
// The partitions' part of these (the rows, truncates and resets) is applied by each owner
// with the partition's fence (derived::SourceFence): a consumer replaced while its last
// messages were in flight cannot count anything twice or out of order. The catalog's part
// (activate, finish, the resets' states, sourced) is run by every node once, at its place
// in the stream, as a script is, and only from the newest claim seen so far; the sources'
// positions move with the segments, in memory, and are recorded with each catalog message
// and every 2 s of reading (a restart reads the stream again from the last record).
//
// Trimming (change_feed_trim.cc). The stream would keep every message; the owner of
// partition 0 trims it, every ~10 s, below the lowest position any node heard from lately
// reads from (ReadFloor, in its heartbeats: its catalog's position and its copy of every
// partition's), and never within the idempotency window (a push's id is known to the stream
// only while its message is in it, across a nats-server's restart), once at least
// trim_every messages would go. First it publishes its catalog as it stands at its catalog
// position (a CatalogSnapshot, snapshot_store.h): a node whose catalog position is no longer
// in the stream (a new node, one down while it was trimmed) starts from that snapshot
// (RestoreCatalog, before its derived counters load); a node that finds the stream trimmed
// past its catalog while it runs (silent for longer than the trim waits) exits to do so.
//
// A push or a script is taken by any node (ChangeFront): checked there, published (a push
// with Nats-Msg-Id = its id: JetStream answers a resend "duplicate" with the first one's
// sequence), then answered once this node sees it applied — a script once this node ran it,
// a push once every partition it moves is at or past its sequence as this node sees them
// (it follows every partition).
//
// What a reader sees of a push that spans partitions: each partition's share appears at
// once (one View, one commit), but the shares of different partitions appear one after the
// other, as each owner applies them (usually within milliseconds): a reader of two of its
// groups on different partitions may see one moved and not yet the other. Reads of derived
// counters are served by every node from what it holds (owned and followed partitions), so
// a node lags the owners by the replication delay; the node that took a push answers only
// once all of it is visible there.
//
// Threads: the feed's own thread reads and applies; Push and Define run on the callers'
// threads (Redis and HTTP workers) and block them, bounded by the options' timeouts, and cut
// short while the node holds them off (HoldOff).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cluster/change_front.h"
#include "cluster/cluster_persistence.h"
#include "cluster/nats_client.h"
#include "cluster/routing.h"
#include "cluster/snapshot_store.h"
#include "engine/derived/derived_counters.h"
#include "engine/engine.h"

namespace tally::cluster {

struct ChangeFeedOptions {
  std::string stream;   // e.g. TALLY_CHANGES
  std::string subject;  // e.g. tally.changes
  uint32_t partition_count = 0;
  // The bounds of a Push or Define on its caller's thread (a Redis or HTTP worker's loop):
  // the publish, then the wait for what it changed.
  int64_t publish_timeout_ms = 2000;
  int64_t wait_ms = 5000;
  // Trimming (above): at least this many messages at a time; 0: never (or without
  // `snapshots`, where the catalog snapshots go). Never the last keep_ms of messages.
  uint64_t trim_every = 0;
  int64_t keep_ms = 24LL * 3600 * 1000;
  SnapshotStore* snapshots = nullptr;
};

// tally verify's hold as the change stream says, on every node alike: set (and moved) by a
// "hold" message at `seq`, ended by "release"; `reached_seq` the consumer's "reached" for it;
// `applied` the highest source position a consumer's batch carried while it stood, whoever
// sent it (ReportHold adds the positions read before: above `position`, a transaction past
// the hold is in the stream).
struct StreamHold {
  bool held = false;
  int64_t position = 0;
  uint64_t seq = 0;
  uint64_t reached_seq = 0;
  int64_t applied = 0;
};

class ChangeFeed final : public ChangeFront {
 public:
  // REQUIRES: everything referenced outlives the feed; the stream exists; `derived` loaded.
  ChangeFeed(NatsConnection& connection, ChangeFeedOptions options, ClusterPersistence& persistence,
             engine::Engine& engine, derived::DerivedCounters& derived);
  ~ChangeFeed() override;  // Stop()s.
  ChangeFeed(const ChangeFeed&) = delete;
  ChangeFeed& operator=(const ChangeFeed&) = delete;

  // Before the derived counters load (and before a ChangeFeed exists): when the stream no
  // longer holds the message after this node's catalog position, its catalog records are
  // replaced by the newest catalog snapshot's. kUnavailable when the stream or the snapshot
  // cannot be read; kCorruption when no snapshot covers the gap. True when it restored.
  static Result<bool> RestoreCatalog(NatsConnection& connection, const ChangeFeedOptions& options,
                                     ClusterPersistence& persistence);

  // Reads how far the catalog got ("cluster/ddl") and starts reading after it.
  Status Start();
  // Stops reading (within about 100 ms). Idempotent.
  void Stop();

  Result<derived::PushOutcome> Push(std::string_view body, std::string_view id,
                                    std::string_view only_counter,
                                    derived::ChangeDecoder& decoder) override;
  Result<std::vector<derived::StatementOutcome>> Define(std::string_view script) override;

  // tally verify (change_front.h; change_feed_verify.cc).
  Status Hold(int64_t position, bool replace) override;
  Status Release() override;
  derived::HoldReport ReportHold() override;
  Status Repair(std::string_view counter, std::span<const derived::KeyValue> values) override;

  // While held off (the node is closing the clients that wait for a partition it lost, or
  // handing one over: it needs every worker's loop back within a bound), a Push or Define
  // refuses at once, and one waiting gives up with an error (it is in the stream: it will be
  // applied; its client resends it by id). Any thread.
  void HoldOff(bool held_off);

  // The next sequence the feed will read; how far every catalog message has run.
  uint64_t next_seq() const;
  uint64_t ddl_seq() const;
  // The lowest sequence this node would read from, after a restart or for a partition it
  // gains: its catalog's next message, or a partition's position (its message included) as
  // this node holds it; 0 until the feed first worked it out. What its heartbeats say. Any
  // thread, without a lock of the keyspace: the feed's thread works it out every 2 s (the
  // heartbeats' thread must never wait for a keyspace stripe a stalled commit holds).
  uint64_t ReadFloor() const { return read_floor_.load(std::memory_order_relaxed); }
  // The lowest ReadFloor of the nodes heard from lately (trimming keeps what they read).
  void SetTrimFloor(std::function<uint64_t()> floor);
  // The stream as this feed reads and trims it (catalog_restored left false). Any thread.
  ChangeStreamStats Stats();

  // How far this node sees the share of `partition` applied (its position record
  // "{<tag>}changes"; 0: nothing yet).
  int64_t AppliedPosition(uint32_t partition);

  // ---- For a PostgreSQL source's consumer (ClusterSourceTarget), on its thread ----
  // Publishes one message of the kinds above ("<kind> <claim> ...", then the body after a
  // newline when not empty), retried with the same `msg_id` while the stream does not
  // answer, up to publish_timeout_ms in all. kUnavailable when it did not take it.
  Result<PubAck> PublishSource(std::string_view head, std::string_view body,
                               std::string_view msg_id);
  // Waits (up to wait_ms) until this node has run the catalog message at `seq`.
  Status AwaitCatalog(uint64_t seq);
  // Waits (up to `timeout`) until the feed has read everything the stream held when called.
  Status CatchUp(std::chrono::milliseconds timeout);
  // What this node's feed has read: the position of `source` (0: none, or reset since) and
  // whether a consumer said "sourced".
  int64_t SourcePosition(const std::string& source) const;
  bool sourced() const;
  // The verification hold as this node's feed has read it; and a wait (up to `timeout`) for
  // it to change (any catalog message run).
  StreamHold hold() const;
  void AwaitHoldChange(std::chrono::milliseconds timeout);

 private:
  static constexpr std::string_view kMagic = "tally-change 1 ";  // every message's start
  // The feed's catalog records: every one starts with the prefix.
  static constexpr std::string_view kClusterRecordPrefix = "cluster/";
  static constexpr std::string_view kDdlRecord = "cluster/ddl";  // ddl_seq_
  static constexpr std::string_view kSourceClaimRecord = "cluster/source-claim";
  static constexpr std::string_view kSourcedRecord = "cluster/sourced";
  static constexpr std::string_view kSourcePositionRecord = "cluster/source-position/";
  // hold_: "cluster/hold/position", ".../seq", ".../reached", ".../applied".
  static constexpr std::string_view kHoldRecord = "cluster/hold/";

  void Run();
  // One message of the stream, at sequence `seq`.
  void Handle(uint64_t seq, std::string_view data);
  void RunScript(uint64_t seq, std::string_view script);
  void ApplyPush(uint64_t seq, std::string_view only_counter, std::string_view body);
  // This node's shares of a message of changes (a push's, a source's), as `order` says.
  // `kind` names it in the log.
  void ApplyShares(uint64_t seq, std::string_view kind, std::string_view only_counter,
                   std::string_view body, const derived::ShareOrder& order);
  uint32_t PartitionOf(std::string_view key) const;
  // A source consumer's message (change_feed_source.cc), and a batch's segments.
  void HandleSource(uint64_t seq, std::string_view head, std::string_view body);
  void ApplyBatch(uint64_t seq, int64_t claim, std::string_view body);
  // tally verify's messages (change_feed_verify.cc).
  void RunHold(uint64_t seq, std::string_view fields);
  void RunRelease(uint64_t seq);
  void HandleReached(uint64_t seq, int64_t claim, std::string_view hold_seq);
  void ApplyRepair(uint64_t seq, std::string_view counter, std::string_view body);
  // Waits (up to wait_ms, cut short while held off) until every partition of `partitions`
  // is at or past `seq` as this node sees it; `what` names the message in the error.
  Status AwaitPartitions(uint64_t seq, const std::set<uint32_t>& partitions, std::string_view what);
  // Records one of hold_'s fields read from the catalog at Start. REQUIRES: mutex_ held.
  void RestoreHold(std::string_view field, int64_t value);
  // Runs `apply` on the shares of the partitions owned now that the feed reads for, held
  // (none handed over or forgotten meanwhile), then has the commit written. Nothing when
  // there are none.
  void WithShares(const std::function<void(std::span<const derived::PartitionShare>)>& apply);
  // Whether the catalog's part of the message at `seq` from `claim` runs here: not run
  // before, and not from a replaced consumer. Records `claim` as the newest.
  bool TakeCatalogMessage(uint64_t seq, int64_t claim);
  // Marks the catalog message at `seq` run: persisted with the source positions and claim.
  void FinishCatalogMessage(uint64_t seq);
  // Where to read from for `partitions`: the lowest of their positions (the message there
  // itself: a consumer's batch is applied segment by segment), or `from` when none is lower.
  uint64_t ReadFrom(std::span<const uint32_t> partitions, uint64_t from);
  // A Nats-Msg-Id nobody else uses: `kind` and 16 random bytes.
  static std::string RandomId(std::string_view kind);
  // Trimming (change_feed_trim.cc), on the feed's thread: when this node owns partition 0,
  // publishes the catalog snapshot and trims, as the top of this file says.
  void MaybeTrim();
  // ReadFloor's value as it stands now (the partitions' positions read from the keyspace).
  uint64_t ComputeReadFloor();
  // The stream delivered `seq` where the feed expected an earlier message: it was trimmed.
  // A catalog behind it cannot go on here: the node exits (a restart restores the catalog).
  void SkipTrimmed(uint64_t seq);
  // The first sequence of [first, below) younger than keep_ms (`below` when none is).
  uint64_t FirstKept(uint64_t first, uint64_t below);
  // Publishes one message; its sequence and whether it was a duplicate.
  Result<PubAck> Publish(std::string data, std::string_view msg_id);

  NatsConnection& connection_;
  const ChangeFeedOptions options_;
  ClusterPersistence& persistence_;
  engine::Engine& engine_;
  derived::DerivedCounters& derived_;
  derived::ChangeDecoder decoder_;             // the feed's thread only
  std::vector<std::string> position_names_;    // index = partition
  std::vector<std::string> fence_names_;       // index = partition: "{<tag>}source"
  std::unique_ptr<OrderedConsumer> consumer_;  // the feed's thread only
  // The feed's thread only: the owned partitions it reads for (ascending), as Run last saw them.
  std::vector<uint32_t> owned_;

  mutable std::mutex mutex_;
  std::condition_variable advanced_;
  // Guarded by mutex_:
  uint64_t next_seq_ = 1;
  uint64_t ddl_seq_ = 0;  // every catalog message (a script, a consumer's) up to here has run
  // The source consumers' state as the stream says, catalog records "cluster/source-claim",
  // "cluster/sourced" and "cluster/source-position/<source>".
  int64_t source_claim_ = 0;
  bool sourced_ = false;
  std::map<std::string, int64_t, std::less<>> source_positions_;
  StreamHold hold_;
  std::map<uint64_t, bool> hold_outcomes_;  // recent "hold" messages: did each take? (for Hold)
  std::function<uint64_t()> trim_floor_;
  uint64_t trims_ = 0;  // this node's trims, and the last one's floor
  uint64_t trimmed_below_ = 0;
  // The outcomes of recent scripts, by sequence, for Define (the last few hundred).
  std::map<uint64_t, Result<std::vector<derived::StatementOutcome>>> scripts_;
  bool stopping_ = false;
  std::atomic<bool> held_off_{false};  // written under mutex_ (Define waits for it), read anywhere
  std::atomic<uint64_t> read_floor_{0};  // ReadFloor: the feed's thread writes it

  std::thread thread_;
};

}  // namespace tally::cluster
