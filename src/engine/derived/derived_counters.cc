#include "engine/derived/derived_counters.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "core/periodic_thread.h"
#include "engine/definitions/parser.h"

namespace tally::derived {

namespace defs = tally::definitions;

namespace {

Error UnknownSource(std::string_view name) {
  return Error{ErrorCode::kNotFound, fmt::format("source {} does not exist", name)};
}

}  // namespace

DerivedCounters::DerivedCounters(engine::Engine& engine, engine::Persistence& store,
                                 DerivedOptions options)
    : options_(options),
      keyspace_(engine, store),
      catalog_(store, keyspace_),
      applier_(engine.keyspace(), options.idempotency_window_ms),
      backfill_(store, keyspace_),
      reads_(keyspace_, options.top_k_max_staleness_ms),
      sweeper_(engine.keyspace()) {
  if (options_.retention_sweep_interval_ms > 0) {
    sweep_thread_ = std::make_unique<PeriodicThread>(
        std::chrono::milliseconds(options_.retention_sweep_interval_ms),
        [this] {
          const size_t removed = SweepRetention(options_.retention_sweep_budget);
          if (removed > 0) spdlog::debug("retention: removed {} expired time buckets", removed);
        },
        "retention");
  }
}

DerivedCounters::~DerivedCounters() { StopRetentionSweeper(); }

void DerivedCounters::Count(const PushOutcome& outcome, bool from_source) {
  changes_applied_.fetch_add(outcome.applied, std::memory_order_relaxed);
  (from_source ? source_changes_applied_ : pushed_changes_applied_)
      .fetch_add(outcome.applied, std::memory_order_relaxed);
  keys_written_.fetch_add(outcome.increments, std::memory_order_relaxed);
}

// ---- Load and DDL ---------------------------------------------------------------------

Status DerivedCounters::Load() {
  {
    std::unique_lock ddl(apply_mutex_);
    auto interrupted = catalog_.Load();
    if (!interrupted) return tl::unexpected(interrupted.error());
    if (options_.keep_interrupted_backfills) {
      // A cluster's source consumer redoes them through the change stream, on every node.
      for (const auto& family : *interrupted) family->backfilling.store(true);
    } else if (auto status = backfill_.RedoInterrupted(*interrupted); !status) {
      return status;
    }
    const auto catalog = catalog_.Snapshot();
    size_t groups = 0;
    for (const auto& [name, family] : catalog->counters) {
      std::lock_guard lock(family->mutex);
      groups += family->keys.size();
    }
    spdlog::info("loaded {} sources and {} derived counters ({} groups)", catalog->sources.size(),
                 catalog->counters.size(), groups);
  }
  // Buckets that expired while the server was down go now, before any read.
  size_t expired = 0;
  while (const size_t removed = SweepRetention(options_.retention_sweep_budget)) {
    expired += removed;
  }
  if (expired > 0) spdlog::info("retention: removed {} expired time buckets", expired);
  return OkStatus();
}

Result<std::vector<StatementOutcome>> DerivedCounters::Execute(std::string_view script) {
  auto statements = defs::ParseScript(script);
  if (!statements) return tl::unexpected(statements.error());
  const Catalog::StartsPending starts_pending = [this](std::string_view source) {
    return backfill_.IsStreamed(source);  // under apply_mutex_, held by the loop below
  };
  std::vector<StatementOutcome> outcomes;
  for (const defs::Statement& statement : *statements) {
    if (std::holds_alternative<defs::ShowCounters>(statement)) {
      for (const CounterListing& counter : Counters()) outcomes.push_back({counter.sql});
      continue;
    }
    if (std::holds_alternative<defs::ShowSources>(statement)) {
      for (const SourceListing& source : Sources()) outcomes.push_back({source.sql});
      continue;
    }
    std::unique_lock ddl(apply_mutex_);
    auto done = catalog_.Execute(statement, starts_pending);
    if (!done) return tl::unexpected(done.error());
    outcomes.push_back({std::move(*done)});
  }
  return outcomes;
}

Result<StatementOutcome> DerivedCounters::Drop(std::string_view name) {
  std::unique_lock ddl(apply_mutex_);
  auto done = catalog_.DropCounter(name);
  if (!done) return tl::unexpected(done.error());
  return StatementOutcome{std::move(*done)};
}

std::vector<CounterListing> DerivedCounters::Counters() const {
  std::shared_lock apply(apply_mutex_);  // the counters' starts
  return catalog_.Counters();
}

std::vector<SourceListing> DerivedCounters::Sources() const { return catalog_.Sources(); }

std::vector<bool> DerivedCounters::ColumnsRead(std::string_view source) const {
  return catalog_.ColumnsRead(source);
}

std::optional<defs::SourceSchema> DerivedCounters::SourceSchemaOf(std::string_view source) const {
  return catalog_.SourceSchemaOf(source);
}

bool DerivedCounters::ShowsMore(std::string_view key) const {
  const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
  const Family* family = catalog->FindCounter(FamilyName(key));
  return family != nullptr && !definitions::ShowsInteger(family->counter);
}

bool DerivedCounters::IsProtectedKey(std::string_view key) const {
  return catalog_.IsProtectedKey(key);
}

std::string DerivedCounters::ProtectedKeyError(std::string_view key) const {
  return catalog_.ProtectedKeyError(key);
}

// ---- Applying changes -----------------------------------------------------------------

Status DerivedCounters::CheckPush(const CatalogSnapshot& catalog, size_t changes,
                                  std::string_view only_counter) const {
  if (!only_counter.empty() && catalog.FindCounter(only_counter) == nullptr) {
    return tl::unexpected(UnknownCounter(only_counter));
  }
  if (changes > options_.max_batch_changes) {
    return InvalidArgument(fmt::format("a push holds at most {} changes; this one has {}",
                                       options_.max_batch_changes, changes));
  }
  return OkStatus();
}

Result<PushOutcome> DerivedCounters::Push(std::string_view body, std::string_view batch_id,
                                          ChangeDecoder& decoder, std::string_view only_counter) {
  auto outcome = [&]() -> Result<PushOutcome> {
    std::shared_lock apply(apply_mutex_);
    const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
    auto decoded = decoder.Decode(body, catalog->Lookup());
    if (!decoded) return tl::unexpected(decoded.error());
    if (auto status = CheckPush(*catalog, decoded->size(), only_counter); !status) {
      return tl::unexpected(status.error());
    }
    return applier_.ApplyChanges(*catalog, *decoded, batch_id, only_counter);
  }();
  if (!outcome) {
    pushes_refused_.fetch_add(1, std::memory_order_relaxed);
    return outcome;
  }
  Count(*outcome, /*from_source=*/false);
  return outcome;
}

Result<PushOutcome> DerivedCounters::ApplyTransaction(std::string_view source,
                                                      std::span<const SourceRowChange> changes,
                                                      int64_t position) {
  const SourceTransactionPart part{source, changes};
  return ApplyParts({&part, 1}, position, {});
}

Result<PushOutcome> DerivedCounters::ApplyTransaction(std::span<const SourceTransactionPart> parts,
                                                      int64_t position) {
  return ApplyParts(parts, position, {});
}

Result<PushOutcome> DerivedCounters::ApplyBackfill(std::string_view counter,
                                                   std::span<const SourceRowChange> rows) {
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  const SourceTransactionPart part{(*family)->counter.source().name, rows};
  return ApplyParts({&part, 1}, 0, counter);
}

Result<PushOutcome> DerivedCounters::ApplyParts(std::span<const SourceTransactionPart> parts,
                                                int64_t position, std::string_view only_counter) {
  if (position != 0) hold_.WaitUntilDue(position);
  std::shared_lock apply(apply_mutex_);
  const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
  // Each source records its own position.
  std::vector<PositionedPart> resolved;
  resolved.reserve(parts.size());
  for (const SourceTransactionPart& part : parts) {
    const SourceEntry* source = catalog->FindSource(part.source);
    if (source == nullptr) return tl::unexpected(UnknownSource(part.source));
    resolved.push_back({source, part.changes, part.source});
  }
  auto outcome = applier_.ApplyPositioned(*catalog, resolved, position, only_counter);
  if (outcome) Count(*outcome, /*from_source=*/true);
  return outcome;
}

Result<uint64_t> DerivedCounters::Repair(std::string_view counter,
                                         std::span<const KeyValue> values) {
  return RepairFamily(counter, [&](Family& family) { return keyspace_.SetGroups(family, values); });
}

Result<uint64_t> DerivedCounters::RepairStates(std::string_view counter,
                                               std::span<const GroupStateValue> states) {
  return RepairFamily(counter,
                      [&](Family& family) { return keyspace_.SetGroupStates(family, states); });
}

Result<uint64_t> DerivedCounters::RepairFamily(
    std::string_view counter, const std::function<Result<uint64_t>(Family&)>& set) {
  std::shared_lock apply(apply_mutex_);
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  return set(**family);
}

// ---- Source positions and verification holds -------------------------------------------

int64_t DerivedCounters::SourcePosition(std::string_view source) {
  return keyspace_.Position(source);
}

Status DerivedCounters::Hold(int64_t position, bool replace) {
  return hold_.Hold(position, replace);
}

HoldReport DerivedCounters::ReportHold() {
  HoldReport report{hold_.state(), 0};
  for (const SourceListing& source : catalog_.Sources()) {
    report.applied = std::max(report.applied, SourcePosition(source.name));
  }
  return report;
}

void DerivedCounters::MarkStreamAt(int64_t position) { hold_.MarkStreamAt(position); }

HoldState DerivedCounters::hold_state() const { return hold_.state(); }

void DerivedCounters::Release() { hold_.Release(); }

// ---- Backfill of a counter created mid-stream ------------------------------------------

void DerivedCounters::MarkStreamed(std::string_view source) {
  std::unique_lock ddl(apply_mutex_);
  backfill_.MarkStreamed(source);
}

void DerivedCounters::MarkEverySourceStreamed() {
  std::unique_lock ddl(apply_mutex_);
  backfill_.MarkEverySourceStreamed();
}

std::vector<std::string> DerivedCounters::PendingCounters(std::string_view source) const {
  const auto catalog = catalog_.Snapshot();
  const SourceEntry* entry = catalog->FindSource(source);
  if (entry == nullptr) return {};
  std::shared_lock apply(apply_mutex_);  // the counters' starts
  return backfill_.PendingCounters(*entry);
}

Result<int64_t> DerivedCounters::CounterStart(std::string_view name) const {
  auto family = catalog_.Snapshot()->Counter(name);
  if (!family) return tl::unexpected(family.error());
  std::shared_lock apply(apply_mutex_);
  return (*family)->start;
}

Result<bool> DerivedCounters::ActivateCounter(std::string_view name, int64_t position) {
  std::unique_lock ddl(apply_mutex_);
  auto family = catalog_.Snapshot()->Counter(name);
  if (!family) return tl::unexpected(family.error());
  return backfill_.Activate(**family, position);
}

Status DerivedCounters::FinishBackfill(std::string_view name) {
  const auto catalog = catalog_.Snapshot();
  return backfill_.Finish(name, catalog->FindCounter(name));
}

Status DerivedCounters::ResetCounter(std::string_view name) {
  std::unique_lock ddl(apply_mutex_);
  auto family = catalog_.Snapshot()->Counter(name);
  if (!family) return tl::unexpected(family.error());
  return backfill_.ResetCounter(**family);
}

Status DerivedCounters::ResetSource(std::string_view source) {
  std::unique_lock ddl(apply_mutex_);
  const auto catalog = catalog_.Snapshot();
  const SourceEntry* entry = catalog->FindSource(source);
  if (entry == nullptr) return tl::unexpected(UnknownSource(source));
  return backfill_.ResetSource(*entry);
}

// ---- Reads ----------------------------------------------------------------------------

Result<std::string> DerivedCounters::KeyOf(std::string_view counter,
                                           std::span<const std::string_view> parts) const {
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  return FamilyReads::KeyOf(**family, parts);
}

Result<std::string> DerivedCounters::PrefixOf(std::string_view counter,
                                              std::span<const std::string_view> parts) const {
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  return FamilyReads::PrefixOf(**family, parts);
}

std::vector<int64_t> DerivedCounters::Get(std::span<const std::string> keys,
                                          uint64_t* required_epoch) {
  return keyspace_.Get(keys, required_epoch);
}

Result<Page> DerivedCounters::Read(std::string_view counter, std::span<const std::string> keys) {
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  Page page;
  page.items = keyspace_.ReadGroups(**family, keys, &page.required_epoch);
  page.names = FamilyReads::Names(**family);
  return page;
}

Result<Page> DerivedCounters::List(std::string_view counter, std::string_view prefix,
                                   std::string_view cursor, size_t limit) {
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  return reads_.List(**family, prefix, cursor, limit);
}

Result<Page> DerivedCounters::Top(std::string_view counter, std::string_view prefix, size_t k) {
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  return reads_.Top(**family, prefix, k);
}

Result<RangeSum> DerivedCounters::Range(std::string_view counter,
                                        std::span<const std::string_view> parts,
                                        std::string_view from, std::string_view to) {
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  return reads_.Range(**family, parts, from, to);
}

// ---- Retention --------------------------------------------------------------------------

size_t DerivedCounters::SweepRetention(size_t budget) {
  RetentionSweeper::Swept swept;
  {
    std::shared_lock apply(apply_mutex_);  // no DDL meanwhile: the families stay
    swept = sweeper_.Sweep(*catalog_.Snapshot(), budget);
  }
  keyspace_.WaitDurable(swept.required_epoch);
  return swept.removed;
}

void DerivedCounters::StartRetentionSweeper() {
  if (sweep_thread_ != nullptr) sweep_thread_->Start();
}

void DerivedCounters::StopRetentionSweeper() {
  if (sweep_thread_ != nullptr) sweep_thread_->Stop();
}

void DerivedCounters::OnFlushAll() {
  const auto catalog = catalog_.Snapshot();
  for (const auto& [name, family] : catalog->counters) {
    std::lock_guard lock(family->mutex);
    family->ClearKeys();
    family->version.fetch_add(1, std::memory_order_relaxed);
  }
}

// ---- On a cluster node ----------------------------------------------------------------

Result<std::vector<StatementOutcome>> DerivedCounters::ExecuteAt(std::string_view script,
                                                                 int64_t position) {
  auto statements = defs::ParseScript(script);
  if (!statements) return tl::unexpected(statements.error());
  // Pending where a source consumer backfills (MarkEverySourceStreamed on every node, at the
  // same place of the stream): the same on every node.
  const Catalog::StartsPending starts_pending = [this](std::string_view source) {
    return backfill_.IsStreamed(source);  // under apply_mutex_, held by the loop below
  };
  std::vector<StatementOutcome> outcomes;
  for (const defs::Statement& statement : *statements) {
    if (std::holds_alternative<defs::ShowCounters>(statement) ||
        std::holds_alternative<defs::ShowSources>(statement)) {
      continue;
    }
    std::unique_lock ddl(apply_mutex_);
    auto done = catalog_.Execute(statement, starts_pending, position);
    if (!done) return tl::unexpected(done.error());
    outcomes.push_back({std::move(*done)});
  }
  return outcomes;
}

Result<std::vector<std::string>> DerivedCounters::PlanPush(std::string_view body,
                                                           std::string_view only_counter,
                                                           ChangeDecoder& decoder,
                                                           size_t* changes) {
  std::shared_lock apply(apply_mutex_);
  const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
  auto decoded = decoder.Decode(body, catalog->Lookup());
  if (!decoded) return tl::unexpected(decoded.error());
  if (auto status = CheckPush(*catalog, decoded->size(), only_counter); !status) {
    return tl::unexpected(status.error());
  }
  *changes = decoded->size();
  for (size_t i = 0; i < decoded->size(); ++i) {
    if (!(*decoded)[i].id.empty()) {
      return InvalidArgument(fmt::format(
          "change {}: ids of single changes are not offered in a cluster: give the push an id "
          "(it makes the whole push idempotent)",
          i + 1));
    }
  }
  return applier_.PlanKeys(*catalog, *decoded, only_counter);
}

Result<PushOutcome> DerivedCounters::ApplyShares(
    std::string_view body, std::string_view only_counter, const ShareOrder& order,
    std::span<const PartitionShare> shares,
    const std::function<uint32_t(std::string_view)>& partition_of, ChangeDecoder& decoder,
    std::vector<uint32_t>* overflowed) {
  std::shared_lock apply(apply_mutex_);
  const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
  auto decoded = decoder.Decode(body, catalog->Lookup());
  const bool counter_gone = !only_counter.empty() && catalog->FindCounter(only_counter) == nullptr;
  const std::span<const DecodedChange> changes = decoded && !counter_gone
                                                     ? std::span<const DecodedChange>(*decoded)
                                                     : std::span<const DecodedChange>();
  auto outcome = applier_.ApplyShares(*catalog, changes, order, only_counter, shares, partition_of,
                                      overflowed);
  if (outcome) Count(*outcome, /*from_source=*/order.fence.has_value());
  return outcome;
}

Status DerivedCounters::CheckRepair(std::string_view counter,
                                    std::span<const KeyValue> values) const {
  auto family = catalog_.Snapshot()->Counter(counter);
  if (!family) return tl::unexpected(family.error());
  return Applier::CheckGroupValues(**family, values);
}

Result<uint64_t> DerivedCounters::RepairShares(
    std::string_view counter, std::span<const KeyValue> values, const ShareOrder& order,
    std::span<const PartitionShare> shares,
    const std::function<uint32_t(std::string_view)>& partition_of) {
  std::shared_lock apply(apply_mutex_);
  const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
  Family* family = catalog->FindCounter(counter);
  return applier_.SetShares(family, family != nullptr ? values : std::span<const KeyValue>(), order,
                            shares, partition_of);
}

void DerivedCounters::MarkShares(const ShareOrder& order, std::span<const PartitionShare> shares,
                                 const std::function<uint32_t(std::string_view)>& partition_of) {
  std::shared_lock apply(apply_mutex_);
  (void)applier_.SetShares(nullptr, {}, order, shares, partition_of);
}

void DerivedCounters::ResetShares(std::string_view source, std::string_view counter,
                                  const ShareOrder& order, std::span<const PartitionShare> shares,
                                  const std::function<uint32_t(std::string_view)>& partition_of) {
  std::shared_lock apply(apply_mutex_);
  const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
  std::vector<Family*> families;
  if (!counter.empty()) {
    if (Family* family = catalog->FindCounter(counter)) families.push_back(family);
  } else if (const SourceEntry* entry = catalog->FindSource(source)) {
    for (const auto& family : entry->counters) families.push_back(family.get());
  }
  applier_.DeleteShares(families, order, shares, partition_of);
}

std::optional<std::string> DerivedCounters::SourceOf(std::string_view counter) const {
  const Family* family = catalog_.Snapshot()->FindCounter(counter);
  if (family == nullptr) return std::nullopt;
  return family->counter.source().name;
}

Status DerivedCounters::ResetCounterState(std::string_view name) {
  std::unique_lock ddl(apply_mutex_);
  Family* family = catalog_.Snapshot()->FindCounter(name);
  if (family == nullptr) return OkStatus();  // dropped later in the stream
  return backfill_.ResetState(*family);
}

Status DerivedCounters::ResetSourceState(std::string_view source) {
  std::unique_lock ddl(apply_mutex_);
  const auto catalog = catalog_.Snapshot();
  const SourceEntry* entry = catalog->FindSource(source);
  if (entry == nullptr) return OkStatus();
  return backfill_.ResetStates(*entry);
}

void DerivedCounters::OnReplicated(std::span<const engine::CommitBatch* const> batches) {
  const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
  if (catalog->counters.empty()) return;
  const auto update = [&](std::string_view key, bool present) {
    Family* family = catalog->FindCounter(FamilyName(key));
    if (family == nullptr || !family->IsGroupKey(key)) return;
    std::lock_guard lock(family->mutex);
    // A replicated batch holds a group's final value whenever it changed: only a group that
    // appears or goes changes the index.
    if (present == family->keys.contains(Absl(key))) return;
    if (present) {
      family->AddKey(key);
    } else {
      family->RemoveKey(key);
    }
    family->version.fetch_add(1, std::memory_order_relaxed);
  };
  for (const engine::CommitBatch* batch : batches) {
    for (size_t i = 0; i < batch->delete_count(); ++i) update(batch->delete_key(i), false);
    for (size_t i = 0; i < batch->put_count(); ++i) update(batch->put_key(i), true);
  }
}

void DerivedCounters::ForgetKeys(const std::function<bool(std::string_view key)>& forgotten) {
  const std::shared_ptr<const CatalogSnapshot> catalog = catalog_.Snapshot();
  for (const auto& [name, family] : catalog->counters) {
    std::lock_guard lock(family->mutex);
    std::vector<std::string> gone;
    for (const std::string& key : family->keys) {
      if (forgotten(key)) gone.push_back(key);
    }
    for (const std::string& key : gone) family->RemoveKey(key);
    if (!gone.empty()) family->version.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace tally::derived
