// SourceTarget: where a PostgresSource's writes go — its transactions, its backfills, its
// positions and its counters' backfill states. On a single node that is the node's own
// derived counters (LocalSourceTarget, below); in a cluster it is the cluster's change
// stream, which every partition owner applies (cluster/source_target.h). What the source
// reads of the catalog (the counters, their columns, the pending ones) it reads from the
// node's DerivedCounters in both cases.
//
// Each method means what DerivedCounters' method of the same name does (derived_counters.h),
// with one change of contract: a write is *durable* once its returned required_epoch is
// (WaitDurable, or the durable listener). Epochs are the target's own: the committer's on a
// single node; in a cluster, the batches of transactions the target puts in the stream.
//
// Threads: the source's own thread, except hold_state, MarkStreamAt and Release (any).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "core/status.h"
#include "engine/derived/derived_counters.h"
#include "engine/engine.h"
#include "sources/postgres/pg_client.h"  // pg_conn

namespace tally::postgres {

class SourceTarget {
 public:
  virtual ~SourceTarget() = default;

  // At the start of every session, before the slot is looked at, with the session's SQL
  // connection: a cluster's consumer takes the slot over from a consumer it replaced and
  // catches up with the change stream here. An error ends the session (it is retried).
  virtual Status BeginSession(pg_conn* sql) = 0;
  virtual Status MarkEverySourceStreamed() = 0;
  virtual int64_t SourcePosition(std::string_view source) = 0;
  virtual Result<derived::PushOutcome> ApplyTransaction(
      std::span<const derived::SourceTransactionPart> parts, int64_t position) = 0;
  virtual Status ResetSource(std::string_view source) = 0;
  virtual Result<bool> ActivateCounter(std::string_view name, int64_t position) = 0;
  virtual Result<derived::PushOutcome> ApplyBackfill(
      std::string_view counter, std::span<const derived::SourceRowChange> rows) = 0;
  virtual Status FinishBackfill(std::string_view name) = 0;
  virtual Status ResetCounter(std::string_view name) = 0;
  // Blocks until `epoch` (a required_epoch of the writes above) is durable; 0: at once. An
  // error (a cluster's stream did not take it) leaves it not durable: nothing past it may
  // be confirmed to PostgreSQL.
  virtual Status WaitDurable(uint64_t epoch) = 0;
  // Calls `listener` with each epoch once it and every one before it are durable, from then
  // on (any thread); durable_epoch() is the last one so far.
  virtual void AddDurableListener(std::function<void(uint64_t)> listener) = 0;
  virtual uint64_t durable_epoch() const = 0;
  // Verification holds (tally verify).
  virtual derived::HoldState hold_state() const = 0;
  virtual void MarkStreamAt(int64_t position) = 0;
  virtual void Release() = 0;
};

// A single node: the node's own derived counters and committer.
class LocalSourceTarget final : public SourceTarget {
 public:
  // `engine` and `derived` must outlive this object.
  LocalSourceTarget(engine::Engine& engine, derived::DerivedCounters& derived)
      : engine_(engine), derived_(derived) {}

  Status BeginSession(pg_conn*) override { return OkStatus(); }
  Status MarkEverySourceStreamed() override {
    derived_.MarkEverySourceStreamed();
    return OkStatus();
  }
  int64_t SourcePosition(std::string_view source) override {
    return derived_.SourcePosition(source);
  }
  Result<derived::PushOutcome> ApplyTransaction(
      std::span<const derived::SourceTransactionPart> parts, int64_t position) override {
    return derived_.ApplyTransaction(parts, position);
  }
  Status ResetSource(std::string_view source) override { return derived_.ResetSource(source); }
  Result<bool> ActivateCounter(std::string_view name, int64_t position) override {
    return derived_.ActivateCounter(name, position);
  }
  Result<derived::PushOutcome> ApplyBackfill(
      std::string_view counter, std::span<const derived::SourceRowChange> rows) override {
    return derived_.ApplyBackfill(counter, rows);
  }
  Status FinishBackfill(std::string_view name) override { return derived_.FinishBackfill(name); }
  Status ResetCounter(std::string_view name) override { return derived_.ResetCounter(name); }
  Status WaitDurable(uint64_t epoch) override {
    if (epoch != 0) engine_.committer().WaitDurable(epoch);
    return OkStatus();
  }
  void AddDurableListener(std::function<void(uint64_t)> listener) override {
    engine_.committer().AddDurableListener(std::move(listener));
  }
  uint64_t durable_epoch() const override { return engine_.committer().durable_epoch(); }
  derived::HoldState hold_state() const override { return derived_.hold_state(); }
  void MarkStreamAt(int64_t position) override { derived_.MarkStreamAt(position); }
  void Release() override { derived_.Release(); }

 private:
  engine::Engine& engine_;
  derived::DerivedCounters& derived_;
};

}  // namespace tally::postgres
