// ChangeFeed's part for tally verify against a cluster (change_feed.h lists the messages): the
// verification hold, set and released through the change stream so that every node — the
// source's consumer wherever it runs, and the node verify reads — sees the same hold at the
// same place of the stream, and the repairs, applied by the partitions' owners.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster/change_feed.h"
#include "cluster/source_batch.h"
#include "core/integer.h"

namespace tally::cluster {
namespace {

constexpr size_t kHoldOutcomesKept = 64;

}  // namespace

Status ChangeFeed::Hold(int64_t position, bool replace) {
  auto ack =
      Publish(fmt::format("{}hold {} {}\n", kMagic, position, replace ? 1 : 0), RandomId("verify"));
  if (!ack) return tl::unexpected(ack.error());
  if (auto status = AwaitCatalog(ack->seq); !status) return status;
  std::lock_guard lock(mutex_);
  const auto found = hold_outcomes_.find(ack->seq);
  if (found != hold_outcomes_.end() && found->second) return OkStatus();
  return MakeError(ErrorCode::kUnavailable,
                   "another verification holds the sources (COUNTER.RELEASE ends it)");
}

Status ChangeFeed::Release() {
  auto ack = Publish(fmt::format("{}release\n", kMagic), RandomId("verify"));
  if (!ack) return tl::unexpected(ack.error());
  return AwaitCatalog(ack->seq);
}

derived::HoldReport ChangeFeed::ReportHold() {
  const StreamHold hold = this->hold();
  derived::HoldReport report;
  report.hold.held = hold.held;
  report.hold.position = hold.position;
  report.applied = hold.applied;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [source, lsn] : source_positions_) {
      report.applied = std::max(report.applied, lsn);
    }
  }
  // Reached here once every partition, as this node holds it, is past the consumer's marker.
  report.hold.reached = hold.held && hold.reached_seq != 0;
  for (uint32_t p = 0; report.hold.reached && p < options_.partition_count; ++p) {
    report.hold.reached = AppliedPosition(p) >= static_cast<int64_t>(hold.reached_seq);
  }
  return report;
}

Status ChangeFeed::Repair(std::string_view counter, std::span<const derived::KeyValue> values) {
  if (auto status = derived_.CheckRepair(counter, values); !status) return status;
  auto ack = Publish(fmt::format("{}repair {}\n{}", kMagic, counter, EncodeGroupValues(values)),
                     RandomId("verify"));
  if (!ack) return tl::unexpected(ack.error());
  std::set<uint32_t> moved;
  for (const derived::KeyValue& item : values) moved.insert(PartitionOf(item.key));
  return AwaitPartitions(ack->seq, moved, "repair");
}

StreamHold ChangeFeed::hold() const {
  std::lock_guard lock(mutex_);
  return hold_;
}

void ChangeFeed::AwaitHoldChange(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const uint64_t ran = ddl_seq_;
  advanced_.wait_for(lock, timeout, [&] { return ddl_seq_ != ran || stopping_; });
}

void ChangeFeed::RestoreHold(std::string_view field, int64_t value) {
  if (field == "position") {
    hold_.held = value != 0;
    hold_.position = value;
  } else if (field == "seq") {
    hold_.seq = static_cast<uint64_t>(value);
  } else if (field == "reached") {
    hold_.reached_seq = static_cast<uint64_t>(value);
  } else if (field == "applied") {
    hold_.applied = value;
  }
}

void ChangeFeed::RunHold(uint64_t seq, std::string_view fields) {
  if (seq <= ddl_seq()) return;  // run before (the feed reads again for a partition gained)
  const std::vector<std::string_view> parts = Split(fields, ' ');
  const std::optional<int64_t> position = parts.size() == 2 ? ParseInt64(parts[0]) : std::nullopt;
  if (!position || *position <= 0 || (parts[1] != "0" && parts[1] != "1")) {
    spdlog::warn("change feed: message {} of {} is a malformed hold: skipped", seq,
                 options_.stream);
  } else {
    std::lock_guard lock(mutex_);
    const bool taken = !hold_.held || parts[1] == "1";
    if (taken) {
      // What the stream held before is in source_positions_ (ReportHold adds it); `applied`
      // keeps what came while held, also from a replaced consumer.
      hold_ = StreamHold{true, *position, seq, 0, hold_.held ? hold_.applied : 0};
    }
    hold_outcomes_.insert_or_assign(seq, taken);
    while (hold_outcomes_.size() > kHoldOutcomesKept) hold_outcomes_.erase(hold_outcomes_.begin());
  }
  FinishCatalogMessage(seq);
}

void ChangeFeed::RunRelease(uint64_t seq) {
  if (seq <= ddl_seq()) return;
  {
    std::lock_guard lock(mutex_);
    hold_ = StreamHold{};
  }
  FinishCatalogMessage(seq);
}

void ChangeFeed::HandleReached(uint64_t seq, int64_t claim, std::string_view hold_seq) {
  // Every owner marks the place in its partitions, whoever sent it: the partitions' records
  // say nothing more than "the stream up to here is applied".
  const derived::ShareOrder marker{static_cast<int64_t>(seq), derived::kPendingStart, {}};
  WithShares([&](std::span<const derived::PartitionShare> shares) {
    derived_.MarkShares(marker, shares, [this](std::string_view key) { return PartitionOf(key); });
  });
  if (!TakeCatalogMessage(seq, claim)) return;
  const std::optional<int64_t> of = ParseInt64(hold_seq);
  {
    std::lock_guard lock(mutex_);
    if (of && hold_.held && static_cast<uint64_t>(*of) == hold_.seq && hold_.reached_seq == 0) {
      hold_.reached_seq = seq;
    }
  }
  FinishCatalogMessage(seq);
}

void ChangeFeed::ApplyRepair(uint64_t seq, std::string_view counter, std::string_view body) {
  const derived::ShareOrder order{static_cast<int64_t>(seq), derived::kPendingStart, {}};
  const auto partition_of = [this](std::string_view key) { return PartitionOf(key); };
  auto values = DecodeGroupValues(body);
  WithShares([&](std::span<const derived::PartitionShare> shares) {
    Status status = values ? OkStatus() : Status(tl::unexpected(values.error()));
    if (values) {
      if (auto repaired = derived_.RepairShares(counter, *values, order, shares, partition_of);
          !repaired) {
        status = tl::unexpected(repaired.error());
      }
    }
    if (status) return;
    // The node that took it checked it as every node would: not seen unless the stream holds
    // what tally did not write. Its place is marked all the same, so nobody waits for it.
    spdlog::error("change feed: the repair at {} was not applied: {}", seq, status.error().message);
    derived_.MarkShares(order, shares, partition_of);
  });
}

}  // namespace tally::cluster
