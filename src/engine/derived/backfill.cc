#include "engine/derived/backfill.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <optional>

#include "engine/derived/catalog_records.h"

namespace tally::derived {

void Backfill::MarkStreamed(std::string_view source) { streamed_.insert(std::string(source)); }

void Backfill::MarkEverySourceStreamed() { every_source_streamed_ = true; }

bool Backfill::IsStreamed(std::string_view source) const {
  return every_source_streamed_ || streamed_.contains(Absl(source));
}

std::vector<std::string> Backfill::PendingCounters(const SourceEntry& source) const {
  std::vector<std::string> names;
  for (const auto& family : source.counters) {
    if (family->start == kPendingStart) names.push_back(family->counter.name());
  }
  return names;
}

Result<bool> Backfill::Activate(Family& family, int64_t position) {
  const std::string& name = family.counter.name();
  if (family.start != kPendingStart) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("counter {} is not waiting for a backfill", name));
  }
  // A transaction above `position` may already be applied without this counter: the
  // snapshot would then miss it for good.
  if (keyspace_.Position(family.counter.source().name) > position) return false;
  const std::array<engine::Persistence::CatalogOp, 2> ops{{
      {RecordName(kStartRecord, name), std::to_string(position)},
      {RecordName(kBackfillRecord, name), std::string()},
  }};
  if (auto status = store_.WriteCatalog(ops); !status) return tl::unexpected(status.error());
  family.start = position;
  family.backfilling.store(true, std::memory_order_relaxed);
  return true;
}

Status Backfill::Finish(std::string_view name, Family* family) {
  const engine::Persistence::CatalogOp op{RecordName(kBackfillRecord, name), std::nullopt};
  if (auto status = store_.WriteCatalog({&op, 1}); !status) return status;
  // Release: whoever sees the counter counting sees every backfilled row applied.
  if (family != nullptr) family->backfilling.store(false, std::memory_order_release);
  return OkStatus();
}

Status Backfill::ResetCounter(Family& family) {
  keyspace_.DeleteGroups(family);
  return ResetState(family);
}

Status Backfill::ResetState(Family& family) {
  const std::string& name = family.counter.name();
  const bool pending = IsStreamed(family.counter.source().name);
  const std::array<engine::Persistence::CatalogOp, 2> ops{{
      {RecordName(kStartRecord, name),
       pending ? std::optional<std::string>(std::string(kPendingStartValue)) : std::nullopt},
      {RecordName(kBackfillRecord, name), std::nullopt},
  }};
  if (auto status = store_.WriteCatalog(ops); !status) return status;
  family.start = pending ? kPendingStart : 0;
  family.backfilling.store(false, std::memory_order_relaxed);
  family.version.fetch_add(1, std::memory_order_relaxed);
  return OkStatus();
}

Status Backfill::ResetSource(const SourceEntry& source) {
  for (const auto& family : source.counters) keyspace_.DeleteGroups(*family);
  if (auto status = ResetStates(source); !status) return status;
  keyspace_.ForgetPosition(source.schema.name);
  return OkStatus();
}

Status Backfill::ResetStates(const SourceEntry& source) {
  std::vector<engine::Persistence::CatalogOp> ops;
  for (const auto& family : source.counters) {
    if (family->start != 0) {
      ops.push_back({RecordName(kStartRecord, family->counter.name()), std::nullopt});
      ops.push_back({RecordName(kBackfillRecord, family->counter.name()), std::nullopt});
    }
  }
  if (ops.empty()) return OkStatus();
  if (auto status = store_.WriteCatalog(ops); !status) return status;
  for (const auto& family : source.counters) {
    family->start = 0;
    family->backfilling.store(false, std::memory_order_relaxed);
  }
  return OkStatus();
}

Status Backfill::RedoInterrupted(std::span<const std::shared_ptr<Family>> families) {
  for (const auto& family : families) {
    keyspace_.DeleteGroups(*family);
    const std::string& name = family->counter.name();
    const std::array<engine::Persistence::CatalogOp, 2> ops{{
        {RecordName(kStartRecord, name), std::string(kPendingStartValue)},
        {RecordName(kBackfillRecord, name), std::nullopt},
    }};
    if (auto status = store_.WriteCatalog(ops); !status) return status;
    family->start = kPendingStart;
    spdlog::info("counter {}: its backfill was interrupted; it is done again", name);
  }
  return OkStatus();
}

}  // namespace tally::derived
