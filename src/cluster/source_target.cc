#include "cluster/source_target.h"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "cluster/source_batch.h"
#include "engine/derived/change_writer.h"

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

// How long BeginSession waits for a replaced consumer's walsender to let the slot go, and
// for the feed to read the stream's tail.
constexpr auto kSlotReleaseWait = std::chrono::seconds(10);
constexpr auto kCatchUpWait = std::chrono::seconds(30);

}  // namespace

ClusterSourceTarget::ClusterSourceTarget(ChangeFeed& feed, derived::DerivedCounters& derived,
                                         std::string slot, int64_t claim, size_t max_body_bytes)
    : feed_(feed),
      derived_(derived),
      slot_(std::move(slot)),
      claim_(claim),
      max_body_bytes_(max_body_bytes),
      nonce_(Clock::now().time_since_epoch().count()) {}

std::string ClusterSourceTarget::NextId(std::string_view kind) {
  return fmt::format("{}:{}:{}:{}", kind, claim_, nonce_, ++next_id_);
}

Status ClusterSourceTarget::BeginSession(pg_conn* sql) {
  // The slot admits one reader: the consumer this one replaced may still hold it (paused,
  // cut off). Its walsender goes, so that it confirms nothing more to the slot.
  const auto deadline = Clock::now() + kSlotReleaseWait;
  for (;;) {
    auto held = postgres::Exec(
        sql,
        "SELECT active_pid, pg_catalog.pg_terminate_backend(active_pid) FROM "
        "pg_catalog.pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL",
        {slot_}, postgres::Deadline::Never(), "taking over replication slot " + slot_);
    if (!held) return tl::unexpected(held.error());
    if (PQntuples(held->get()) == 0) break;
    spdlog::info("postgres source: slot {} was held by PostgreSQL backend {}: terminated", slot_,
                 postgres::Text(held->get(), 0, 0));
    if (Clock::now() >= deadline) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("replication slot {} is still held by another reader", slot_));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (auto status = feed_.CatchUp(kCatchUpWait); !status) return status;
  for (const derived::CounterListing& counter : derived_.Counters()) {
    if (counter.state != derived::CounterState::kBackfilling) continue;
    spdlog::info(
        "postgres source: counter {} was left backfilling by an earlier consumer: it is "
        "backfilled again",
        counter.name);
    if (auto status = ResetCounter(counter.name); !status) return status;
  }
  return OkStatus();
}

Status ClusterSourceTarget::PublishCatalog(const std::string& head) {
  if (auto status = Flush(); !status) return status;  // in the stream's order
  auto ack = feed_.PublishSource(head, {}, NextId("catalog"));
  if (!ack) return tl::unexpected(ack.error());
  return feed_.AwaitCatalog(ack->seq);
}

Status ClusterSourceTarget::MarkEverySourceStreamed() {
  if (feed_.sourced()) return OkStatus();
  return PublishCatalog(fmt::format("sourced {}", claim_));
}

int64_t ClusterSourceTarget::SourcePosition(std::string_view source) {
  return feed_.SourcePosition(std::string(source));
}

Result<derived::PushOutcome> ClusterSourceTarget::ApplyTransaction(
    std::span<const derived::SourceTransactionPart> parts, int64_t position) {
  derived::PushOutcome outcome;
  if (position == 0) {  // a backfill chunk, of every counter of its source
    for (const derived::SourceTransactionPart& part : parts) {
      auto published = PublishRows(part.source, "-", part.changes);
      if (!published) return published;
      outcome.changes += published->changes;
      outcome.applied += published->applied;
    }
    return outcome;
  }
  if (auto status = WaitForHold(position); !status) return tl::unexpected(status.error());
  std::vector<std::string_view> names;
  for (const derived::SourceTransactionPart& part : parts) names.push_back(part.source);
  const std::string sources = fmt::format("{}", fmt::join(names, ","));
  bool any = false;
  for (const auto& part : parts) any = any || !part.changes.empty();
  if (!any) {  // positions alone
    AppendAt(position, sources, &batch_);
    outcome.required_epoch = open_epoch();
    return outcome;
  }
  // The transaction's segments, in its order: its rows, cut into parts of max_body_bytes of
  // its own (never where a batch happens to fill: a consumer that sends the transaction
  // again must cut it the same way, or the fences would take a part for another), and a
  // TRUNCATE alone. The batch is published when full, between parts.
  int64_t part_number = 0;
  size_t part_bytes = 0;
  bool rows_open = false;
  for (const derived::SourceTransactionPart& part : parts) {
    const std::optional<definitions::SourceSchema> schema = derived_.SourceSchemaOf(part.source);
    if (!schema) {
      return MakeError(ErrorCode::kNotFound, fmt::format("no source {}", part.source));
    }
    for (const derived::SourceRowChange& change : part.changes) {
      if (change.truncate) {
        AppendTruncate(position, ++part_number, part.source, &batch_);
        rows_open = false;
        continue;
      }
      if (!rows_open) {
        if (batch_.size() >= max_body_bytes_) {
          if (auto status = Flush(); !status) return tl::unexpected(status.error());
        }
        AppendRowsHead(position, ++part_number, sources, &batch_);
        rows_open = true;
        part_bytes = 0;
      }
      const size_t before = batch_.size();
      if (auto status = derived::AppendChangeJson(*schema, change, &batch_); !status) {
        return tl::unexpected(status.error());
      }
      part_bytes += batch_.size() - before;
      ++outcome.applied;
      if (part_bytes >= max_body_bytes_) rows_open = false;
    }
    outcome.changes += part.changes.size();
  }
  if (batch_.size() >= max_body_bytes_) {
    if (auto status = Flush(); !status) return tl::unexpected(status.error());
  }
  outcome.required_epoch = open_epoch();
  return outcome;
}

uint64_t ClusterSourceTarget::open_epoch() const { return durable_epoch() + 1; }

derived::HoldState ClusterSourceTarget::hold_state() const {
  const StreamHold hold = feed_.hold();
  return {hold.held, hold.position, hold.held && reached_hold_.load() == hold.seq};
}

void ClusterSourceTarget::MarkStreamAt(int64_t position) {
  const StreamHold hold = feed_.hold();
  if (!hold.held || position < hold.position) return;
  if (auto status = MarkReached(hold); !status) {
    spdlog::warn("postgres source: cannot mark the verification hold at {} reached: {}",
                 hold.position, status.error().message);
  }
}

void ClusterSourceTarget::Release() { stopping_ = true; }

Status ClusterSourceTarget::MarkReached(const StreamHold& hold) {
  if (reached_hold_.load() == hold.seq) return OkStatus();
  if (auto status = Flush(); !status) return status;  // everything up to the hold, first
  auto ack =
      feed_.PublishSource(fmt::format("reached {} {}", claim_, hold.seq), {}, NextId("reached"));
  if (!ack) return tl::unexpected(ack.error());
  reached_hold_ = hold.seq;
  return OkStatus();
}

Status ClusterSourceTarget::WaitForHold(int64_t position) {
  for (;;) {
    const StreamHold hold = feed_.hold();
    if (!hold.held || position <= hold.position) return OkStatus();
    if (stopping_) {
      return MakeError(ErrorCode::kUnavailable,
                       "the consumer stops while a verification hold stands");
    }
    if (auto status = MarkReached(hold); !status) return status;
    feed_.AwaitHoldChange(std::chrono::milliseconds(100));
  }
}

Status ClusterSourceTarget::Flush() {
  if (batch_.empty()) return OkStatus();
  auto ack = feed_.PublishSource(fmt::format("batch {}", claim_), batch_, NextId("batch"));
  // Kept when the stream did not take it: sent again, first, by the next flush (what it
  // holds that the session sends again meanwhile counts once, behind the fences).
  if (!ack) return tl::unexpected(ack.error());
  batch_.clear();
  std::vector<std::function<void(uint64_t)>> listeners;
  uint64_t durable = 0;
  {
    std::lock_guard lock(mutex_);
    durable = ++durable_;
    listeners = listeners_;
  }
  for (const auto& listener : listeners) listener(durable);
  return OkStatus();
}

Status ClusterSourceTarget::WaitDurable(uint64_t epoch) {
  if (epoch == 0 || epoch <= durable_epoch()) return OkStatus();
  return Flush();
}

void ClusterSourceTarget::AddDurableListener(std::function<void(uint64_t)> listener) {
  std::lock_guard lock(mutex_);
  listeners_.push_back(std::move(listener));
}

uint64_t ClusterSourceTarget::durable_epoch() const {
  std::lock_guard lock(mutex_);
  return durable_;
}

Result<derived::PushOutcome> ClusterSourceTarget::PublishRows(
    std::string_view source, std::string_view counter,
    std::span<const derived::SourceRowChange> rows) {
  const std::optional<definitions::SourceSchema> schema = derived_.SourceSchemaOf(source);
  if (!schema) return MakeError(ErrorCode::kNotFound, fmt::format("no source {}", source));
  if (auto status = Flush(); !status) return tl::unexpected(status.error());
  derived::PushOutcome outcome;
  std::string body;
  auto publish = [&]() -> Status {
    if (body.empty()) return OkStatus();
    auto ack = feed_.PublishSource(fmt::format("rows {} {} {}", claim_, source, counter), body,
                                   NextId("rows"));
    if (!ack) return tl::unexpected(ack.error());
    body.clear();
    return OkStatus();
  };
  for (const derived::SourceRowChange& row : rows) {
    if (auto status = derived::AppendChangeJson(*schema, row, &body); !status) {
      return tl::unexpected(status.error());
    }
    ++outcome.changes;
    ++outcome.applied;
    if (body.size() >= max_body_bytes_) {
      if (auto status = publish(); !status) return tl::unexpected(status.error());
    }
  }
  if (auto status = publish(); !status) return tl::unexpected(status.error());
  return outcome;
}

Status ClusterSourceTarget::ResetSource(std::string_view source) {
  return PublishCatalog(fmt::format("source-reset {} {}", claim_, source));
}

Result<bool> ClusterSourceTarget::ActivateCounter(std::string_view name, int64_t position) {
  const std::optional<std::string> family_source = derived_.SourceOf(name);
  if (!family_source) return MakeError(ErrorCode::kNotFound, fmt::format("no counter {}", name));
  // A transaction above `position` may be in the stream already without this counter.
  if (feed_.SourcePosition(*family_source) > position) return false;
  if (auto status = PublishCatalog(fmt::format("activate {} {} {}", claim_, name, position));
      !status)
    return tl::unexpected(status.error());
  auto start = derived_.CounterStart(name);
  if (!start) return tl::unexpected(start.error());
  if (*start != position) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("counter {} was not activated (a newer source consumer?)", name));
  }
  return true;
}

Result<derived::PushOutcome> ClusterSourceTarget::ApplyBackfill(
    std::string_view counter, std::span<const derived::SourceRowChange> rows) {
  const std::optional<std::string> source = derived_.SourceOf(counter);
  if (!source) return MakeError(ErrorCode::kNotFound, fmt::format("no counter {}", counter));
  return PublishRows(*source, counter, rows);
}

Status ClusterSourceTarget::FinishBackfill(std::string_view name) {
  return PublishCatalog(fmt::format("finish {} {}", claim_, name));
}

Status ClusterSourceTarget::ResetCounter(std::string_view name) {
  return PublishCatalog(fmt::format("counter-reset {} {}", claim_, name));
}

}  // namespace tally::cluster
