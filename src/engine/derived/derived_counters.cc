#include "engine/derived/derived_counters.h"

#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <queue>

#include "core/integer.h"
#include "core/periodic_thread.h"
#include "engine/definitions/compiler.h"
#include "engine/definitions/formula.h"
#include "engine/definitions/parser.h"
#include "engine/definitions/time_util.h"

namespace tally::derived {

namespace defs = tally::definitions;

namespace {

// Catalog record names: "source/<name>" and "counter/<name>" hold the normalised statement;
// "dropping/<name>" marks a DROP COUNTER whose groups may not all be deleted yet.
constexpr std::string_view kSourceRecord = "source/";
constexpr std::string_view kCounterRecord = "counter/";
constexpr std::string_view kDroppingRecord = "dropping/";
// "start/<name>": a counter added while its source was streamed: "pending" (not yet
// activated) or the decimal consistent point it counts from. "backfill/<name>": its
// backfill from that point is not complete yet (redone at start).
constexpr std::string_view kStartRecord = "start/";
constexpr std::string_view kBackfillRecord = "backfill/";
constexpr int64_t kPending = INT64_MAX;
constexpr std::string_view kPendingValue = "pending";

// Keys per View when groups are deleted or read in bulk: bounds how long a stripe is held.
constexpr size_t kChunk = 1024;

// Cached top-K answers per counter (distinct prefixes and k); past this the cache restarts.
constexpr size_t kTopCacheEntries = 4096;

std::string MarkerKey(std::string_view id) {
  std::string key(kIdMarkerPrefix);
  key.append(id);
  return key;
}

// Debian's Abseil has its own string_view: heterogeneous lookups need this spelling.
absl::string_view Absl(std::string_view text) { return {text.data(), text.size()}; }

Error UnknownCounter(std::string_view name) {
  return Error{ErrorCode::kNotFound, fmt::format("counter {} does not exist", name)};
}

// Calls visit(view, key) for every key, a chunk of keys at a time under one View of their
// stripes. Returns the newest commit epoch the visits depend on.
template <typename Visit>
uint64_t VisitInChunks(engine::Keyspace& keyspace, std::span<const std::string> keys,
                       Visit&& visit) {
  uint64_t epoch = 0;
  std::vector<engine::HashedKey> hashed;
  for (size_t begin = 0; begin < keys.size(); begin += kChunk) {
    const size_t end = std::min(keys.size(), begin + kChunk);
    hashed.clear();
    for (size_t i = begin; i < end; ++i) hashed.emplace_back(keys[i]);
    engine::View view = keyspace.Lock(hashed);
    for (const engine::HashedKey& key : hashed) visit(view, key);
    epoch = std::max(epoch, view.required_epoch());
  }
  return epoch;
}

// The counter name a key would belong to: what precedes its first ':'.
std::string_view FamilyName(std::string_view key) {
  const size_t colon = key.find(':');
  return colon == std::string_view::npos ? std::string_view{} : key.substr(0, colon);
}

}  // namespace

// One derived counter: its compiled definition and the ordered index of its live groups.
struct DerivedCounters::Family {
  explicit Family(defs::CompiledCounter compiled) : counter(std::move(compiled)) {}

  const defs::CompiledCounter counter;
  // Source transactions at or below this position do not move the counter: 0 for most,
  // kPending until a backfill activates it, then the backfill's consistent point.
  // Written with apply_mutex_ held exclusively, read with it held.
  int64_t start = 0;
  // A "backfill/<name>" marker stands: activated, the snapshot's rows not all applied yet.
  std::atomic<bool> backfilling{false};
  std::mutex mutex;
  absl::btree_set<std::string> keys;  // guarded by mutex
  // With a retention: the live groups by the start of their time bucket, oldest first, so
  // that the sweep finds the expired ones without a scan. A group whose bucket is NULL has
  // no time and is never removed.
  absl::btree_set<std::pair<int64_t, std::string>> by_bucket;  // guarded by mutex
  // Bumped by every push that changes a group; a cached top-K of an older version may be
  // stale.
  std::atomic<uint64_t> version{0};
  struct TopEntry {
    uint64_t version = 0;
    int64_t computed_ms = 0;
    Page page;
  };
  absl::flat_hash_map<std::string, TopEntry> top_cache;  // guarded by mutex

  // The index changes: every insertion and removal of a live group goes through these.
  // REQUIRES: mutex held.
  void AddKey(std::string_view key) {
    if (counter.retention()) {
      if (const std::optional<int64_t> start = counter.BucketOfKey(key)) {
        by_bucket.emplace(*start, std::string(key));
      }
    }
    keys.emplace(key);
  }
  void RemoveKey(std::string_view key) {
    if (counter.retention()) {
      if (const std::optional<int64_t> start = counter.BucketOfKey(key)) {
        by_bucket.erase(std::pair<int64_t, std::string>(*start, key));
      }
    }
    keys.erase(Absl(key));
  }
  void ClearKeys() {
    keys.clear();
    by_bucket.clear();
    top_cache.clear();
  }
};

// A source with the counters that read it.
struct DerivedCounters::SourceEntry {
  defs::SourceSchema schema;
  std::string sql;
  SourceView view;  // view.schema points at schema: a SourceEntry never moves
  std::vector<std::shared_ptr<DerivedCounters::Family>> counters;
};

// An immutable snapshot of every source and counter. DDL builds a new one.
struct DerivedCounters::Catalog {
  absl::flat_hash_map<std::string, std::shared_ptr<SourceEntry>> sources;
  absl::flat_hash_map<std::string, std::shared_ptr<Family>> counters;
  absl::flat_hash_set<std::string> dropping;  // counters whose groups are being deleted

  const Family* FindCounter(std::string_view name) const {
    const auto it = counters.find(Absl(name));
    return it == counters.end() ? nullptr : it->second.get();
  }

  // A copy whose source entries are rebuilt, so that each lists its counters and knows
  // which columns they read.
  std::shared_ptr<Catalog> Rebuilt() const {
    auto next = std::make_shared<Catalog>();
    next->dropping = dropping;
    next->counters = counters;
    for (const auto& [name, old] : sources) {
      auto entry = std::make_shared<SourceEntry>();
      entry->schema = old->schema;
      entry->sql = old->sql;
      entry->view.schema = &entry->schema;
      entry->view.read_by.assign(entry->schema.columns.size(), "");
      next->sources.emplace(name, std::move(entry));
    }
    for (const auto& [name, family] : counters) {
      SourceEntry& source = *next->sources.at(family->counter.source().name);
      source.counters.push_back(family);
      for (const int32_t column : family->counter.columns_used()) {
        std::string& reader = source.view.read_by[column];
        if (reader.empty() || name < reader) reader = name;
      }
    }
    // A stable order of application within a change, whatever the hash map's order.
    for (auto& [name, entry] : next->sources) {
      std::ranges::sort(entry->counters, {}, [](const auto& f) { return f->counter.name(); });
    }
    return next;
  }
};

// The names of the defined (or still dropping) counters.
struct DerivedCounters::NameSet {
  absl::flat_hash_set<std::string> names;
};

DerivedCounters::DerivedCounters(engine::Engine& engine, engine::Persistence& store,
                                 DerivedOptions options)
    : engine_(engine), store_(store), options_(options), catalog_(std::make_shared<Catalog>()) {
  if (options_.retention_sweep_interval_ms > 0) {
    sweeper_ = std::make_unique<PeriodicThread>(
        std::chrono::milliseconds(options_.retention_sweep_interval_ms), [this] {
          const size_t removed = SweepRetention(options_.retention_sweep_budget);
          if (removed > 0) spdlog::debug("retention: removed {} expired time buckets", removed);
        });
  }
}

DerivedCounters::~DerivedCounters() {
  StopRetentionSweeper();
  delete protected_names_.load();
}

std::shared_ptr<const DerivedCounters::Catalog> DerivedCounters::Snapshot() const {
  std::lock_guard lock(catalog_mutex_);
  return catalog_;
}

void DerivedCounters::Install(std::shared_ptr<const Catalog> catalog) {
  auto names = std::make_unique<NameSet>();
  for (const auto& [name, family] : catalog->counters) names->names.insert(name);
  for (const std::string& name : catalog->dropping) names->names.insert(name);
  std::lock_guard lock(catalog_mutex_);
  catalog_ = std::move(catalog);
  const NameSet* old = protected_names_.exchange(names.release(), std::memory_order_acq_rel);
  if (old != nullptr) retired_names_.emplace_back(old);
}

bool DerivedCounters::IsProtectedKey(std::string_view key) const {
  if (IsInternalKey(key)) return true;
  const NameSet* names = protected_names_.load(std::memory_order_acquire);
  if (names == nullptr || names->names.empty()) return false;
  const std::string_view family = FamilyName(key);
  return !family.empty() && names->names.contains(Absl(family));
}

std::string DerivedCounters::ProtectedKeyError(std::string_view key) const {
  if (IsInternalKey(key)) {
    return "ERR keys that start with \\x00id: or \\x00pos: are tally's own records "
           "(idempotency markers, source positions)";
  }
  return fmt::format(
      "ERR key '{}' belongs to the derived counter '{}': it changes only through pushed "
      "changes (COUNTER.PUSH, POST /v1/changes)",
      key.substr(0, 128), FamilyName(key));
}

void DerivedCounters::WaitDurable(uint64_t epoch) {
  engine_.committer().WaitDurable(epoch);
  if (engine_.durability() == engine::Durability::kAsync) {
    if (auto status = store_.Sync(); !status) spdlog::error("sync: {}", status.error().message);
  }
}

// ---- Load -----------------------------------------------------------------------------

Status DerivedCounters::Load() {
  auto records = store_.ReadCatalog();
  if (!records) return tl::unexpected(records.error());
  auto catalog = std::make_shared<Catalog>();
  // Sources first: counters are compiled against them.
  for (const auto& [name, sql] : *records) {
    if (!name.starts_with(kSourceRecord)) continue;
    auto statement = defs::ParseStatement(sql);
    const auto* create = statement ? std::get_if<defs::CreateSource>(&*statement) : nullptr;
    if (create == nullptr)
      return Corruption(fmt::format("catalog record {} is not a CREATE SOURCE", name));
    auto schema = defs::CompileSource(*create);
    if (!schema)
      return Corruption(fmt::format("catalog record {}: {}", name, schema.error().message));
    auto entry = std::make_shared<SourceEntry>();
    entry->schema = std::move(*schema);
    entry->sql = sql;
    catalog->sources.emplace(entry->schema.name, std::move(entry));
  }
  const defs::Catalog lookup = [&](std::string_view source) -> const defs::SourceSchema* {
    const auto it = catalog->sources.find(Absl(source));
    return it == catalog->sources.end() ? nullptr : &it->second->schema;
  };
  for (const auto& [name, sql] : *records) {
    if (name.starts_with(kCounterRecord)) {
      auto compiled = defs::CompileSql(sql, lookup);
      if (!compiled) {
        return Corruption(fmt::format("catalog record {}: {}", name, compiled.error().message));
      }
      auto family = std::make_shared<Family>(std::move(*compiled));
      catalog->counters.emplace(family->counter.name(), std::move(family));
    } else if (name.starts_with(kDroppingRecord)) {
      catalog->dropping.insert(name.substr(kDroppingRecord.size()));
    }
  }
  std::vector<std::shared_ptr<Family>> interrupted;  // backfills to redo
  for (const auto& [name, value] : *records) {
    if (name.starts_with(kStartRecord)) {
      const auto it =
          catalog->counters.find(Absl(std::string_view(name).substr(kStartRecord.size())));
      if (it == catalog->counters.end()) continue;
      if (value == kPendingValue) {
        it->second->start = kPending;
      } else {
        try {
          it->second->start = std::stoll(value);
        } catch (...) {
          return Corruption(fmt::format("catalog record {}: '{}' is not a position", name, value));
        }
      }
    } else if (name.starts_with(kBackfillRecord)) {
      const auto it =
          catalog->counters.find(Absl(std::string_view(name).substr(kBackfillRecord.size())));
      if (it != catalog->counters.end()) interrupted.push_back(it->second);
    }
  }

  // The family indexes, from one pass over the keyspace.
  std::vector<std::string> keys;
  std::vector<std::string> orphans;  // groups of interrupted drops
  uint64_t cursor = 0;
  do {
    keys.clear();
    cursor = engine_.keyspace().Scan(cursor, 65536, nullptr, &keys);
    for (std::string& key : keys) {
      const std::string_view family = FamilyName(key);
      if (family.empty()) continue;
      if (const auto it = catalog->counters.find(Absl(family)); it != catalog->counters.end()) {
        std::lock_guard lock(it->second->mutex);
        it->second->AddKey(key);
      } else if (catalog->dropping.contains(Absl(family))) {
        orphans.push_back(std::move(key));
      }
    }
  } while (cursor != 0);

  std::unique_lock ddl(apply_mutex_);
  Install(catalog->Rebuilt());
  if (!catalog->dropping.empty()) {
    Family orphan_family{defs::CompiledCounter{}};
    orphan_family.keys.insert(orphans.begin(), orphans.end());
    DeleteGroups(orphan_family);
    std::vector<engine::Persistence::CatalogOp> ops;
    for (const std::string& name : catalog->dropping) {
      ops.push_back({std::string(kDroppingRecord) + name, std::nullopt});
      spdlog::info("finished dropping counter {}", name);
    }
    if (auto status = store_.WriteCatalog(ops); !status) return status;
    auto next = Snapshot()->Rebuilt();
    next->dropping.clear();
    Install(std::move(next));
  }
  // A backfill a crash interrupted: its groups go, and the counter waits for a new one.
  for (const auto& family : interrupted) {
    DeleteGroups(*family);
    const std::string& name = family->counter.name();
    const std::array<engine::Persistence::CatalogOp, 2> ops{{
        {std::string(kStartRecord) + name, std::string(kPendingValue)},
        {std::string(kBackfillRecord) + name, std::nullopt},
    }};
    if (auto status = store_.WriteCatalog(ops); !status) return status;
    family->start = kPending;
    spdlog::info("counter {}: its backfill was interrupted; it is done again", name);
  }
  size_t groups = 0;
  for (const auto& [name, family] : catalog->counters) groups += family->keys.size();
  spdlog::info("loaded {} sources and {} derived counters ({} groups)", catalog->sources.size(),
               catalog->counters.size(), groups);
  // Buckets that expired while the server was down go now, before any read.
  ddl.unlock();
  size_t expired = 0;
  while (const size_t removed = SweepRetention(options_.retention_sweep_budget)) {
    expired += removed;
  }
  if (expired > 0) spdlog::info("retention: removed {} expired time buckets", expired);
  return OkStatus();
}

// ---- DDL ------------------------------------------------------------------------------

Result<std::vector<StatementOutcome>> DerivedCounters::Execute(std::string_view script) {
  auto statements = defs::ParseScript(script);
  if (!statements) return tl::unexpected(statements.error());
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
    Result<std::string> done = std::visit(
        [&](const auto& s) -> Result<std::string> {
          using T = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<T, defs::CreateSource>) return CreateSource(s);
          if constexpr (std::is_same_v<T, defs::DropSource>) return DropSource(s);
          if constexpr (std::is_same_v<T, defs::CreateCounter>) return CreateCounter(s);
          if constexpr (std::is_same_v<T, defs::DropCounter>) return DropCounter(s.name);
          return std::string();
        },
        statement);
    if (!done) return tl::unexpected(done.error());
    outcomes.push_back({std::move(*done)});
  }
  return outcomes;
}

Result<StatementOutcome> DerivedCounters::Drop(std::string_view name) {
  std::unique_lock ddl(apply_mutex_);
  auto done = DropCounter(name);
  if (!done) return tl::unexpected(done.error());
  return StatementOutcome{std::move(*done)};
}

Result<std::string> DerivedCounters::CreateSource(const defs::CreateSource& create) {
  auto schema = defs::CompileSource(create);
  if (!schema) return tl::unexpected(schema.error());
  const std::string sql = defs::SourceSql(*schema);
  auto catalog = Snapshot();
  if (const auto it = catalog->sources.find(schema->name); it != catalog->sources.end()) {
    if (it->second->sql == sql) return fmt::format("CREATE SOURCE {} (unchanged)", schema->name);
    return InvalidArgument(fmt::format(
        "source {} already exists with other columns; DROP SOURCE it first (its counters "
        "too)",
        schema->name));
  }
  const engine::Persistence::CatalogOp op{std::string(kSourceRecord) + schema->name, sql};
  if (auto status = store_.WriteCatalog({&op, 1}); !status) return tl::unexpected(status.error());
  auto next = std::make_shared<Catalog>(*catalog);
  auto entry = std::make_shared<SourceEntry>();
  entry->sql = sql;
  entry->schema = std::move(*schema);
  const std::string name = entry->schema.name;
  next->sources.emplace(name, std::move(entry));
  Install(next->Rebuilt());
  return fmt::format("CREATE SOURCE {}", name);
}

Result<std::string> DerivedCounters::DropSource(const defs::DropSource& drop) {
  auto catalog = Snapshot();
  const auto it = catalog->sources.find(drop.name);
  if (it == catalog->sources.end()) {
    return InvalidArgument(fmt::format("line {}, column {}: source {} does not exist",
                                       drop.name_pos.line, drop.name_pos.column, drop.name));
  }
  if (!it->second->counters.empty()) {
    return InvalidArgument(fmt::format("source {} is read by counter {}: drop the counter first",
                                       drop.name, it->second->counters.front()->counter.name()));
  }
  const engine::Persistence::CatalogOp op{std::string(kSourceRecord) + drop.name, std::nullopt};
  if (auto status = store_.WriteCatalog({&op, 1}); !status) return tl::unexpected(status.error());
  auto next = std::make_shared<Catalog>(*catalog);
  next->sources.erase(drop.name);
  Install(next->Rebuilt());
  return fmt::format("DROP SOURCE {}", drop.name);
}

Result<std::string> DerivedCounters::CreateCounter(const defs::CreateCounter& create) {
  auto catalog = Snapshot();
  auto compiled = defs::Compile(create, [&](std::string_view source) -> const defs::SourceSchema* {
    const auto it = catalog->sources.find(Absl(source));
    return it == catalog->sources.end() ? nullptr : &it->second->schema;
  });
  if (!compiled) return tl::unexpected(compiled.error());
  const std::string& name = compiled->name();
  const std::string sql = compiled->create_sql();
  if (const Family* existing = catalog->FindCounter(name)) {
    if (existing->counter.create_sql() == sql) {
      return fmt::format("CREATE COUNTER {} (unchanged)", name);
    }
    return InvalidArgument(fmt::format(
        "counter {} already exists with another definition; DROP COUNTER it first", name));
  }
  if (catalog->dropping.contains(Absl(name))) {
    return InvalidArgument(fmt::format("counter {} is still being dropped", name));
  }
  // Plain counters already spelled like this counter's groups would be taken for them.
  const std::string prefix = name + ":";
  std::vector<std::string> clashes;
  uint64_t cursor = 0;
  do {
    cursor = engine_.keyspace().Scan(
        cursor, 65536, [&](std::string_view key) { return key.starts_with(prefix); }, &clashes);
  } while (cursor != 0 && clashes.empty());
  if (!clashes.empty()) {
    return InvalidArgument(fmt::format(
        "plain counters named {}... exist (e.g. '{}'): a derived counter owns every key that "
        "starts with its name and ':'; delete them or choose another name",
        prefix, clashes.front().substr(0, 128)));
  }
  // On a streamed source the counter waits for its backfill (see MarkStreamed).
  const bool pending = IsStreamed(compiled->source().name);
  std::vector<engine::Persistence::CatalogOp> ops{{std::string(kCounterRecord) + name, sql}};
  if (pending) ops.push_back({std::string(kStartRecord) + name, std::string(kPendingValue)});
  if (auto status = store_.WriteCatalog(ops); !status) return tl::unexpected(status.error());
  auto next = std::make_shared<Catalog>(*catalog);
  auto family = std::make_shared<Family>(std::move(*compiled));
  if (pending) family->start = kPending;
  next->counters.emplace(family->counter.name(), family);
  Install(next->Rebuilt());
  return fmt::format("CREATE COUNTER {}", family->counter.name());
}

Result<std::string> DerivedCounters::DropCounter(std::string_view name) {
  auto catalog = Snapshot();
  const auto it = catalog->counters.find(Absl(name));
  if (it == catalog->counters.end()) {
    return MakeError(ErrorCode::kNotFound, fmt::format("counter {} does not exist", name));
  }
  const std::shared_ptr<Family> family = it->second;
  // First durably "dropping" (a crash from here on finishes the drop at start), then the
  // groups, then the marker.
  const std::array<engine::Persistence::CatalogOp, 4> begin{{
      {std::string(kCounterRecord) + std::string(name), std::nullopt},
      {std::string(kStartRecord) + std::string(name), std::nullopt},
      {std::string(kBackfillRecord) + std::string(name), std::nullopt},
      {std::string(kDroppingRecord) + std::string(name), std::string()},
  }};
  if (auto status = store_.WriteCatalog(begin); !status) return tl::unexpected(status.error());
  auto next = std::make_shared<Catalog>(*catalog);
  next->counters.erase(Absl(name));
  next->dropping.insert(std::string(name));
  Install(next->Rebuilt());

  DeleteGroups(*family);
  const engine::Persistence::CatalogOp finish{std::string(kDroppingRecord) + std::string(name),
                                              std::nullopt};
  if (auto status = store_.WriteCatalog({&finish, 1}); !status) {
    return tl::unexpected(status.error());
  }
  auto done = std::make_shared<Catalog>(*Snapshot());
  done->dropping.erase(Absl(name));
  Install(done->Rebuilt());
  return fmt::format("DROP COUNTER {}", name);
}

void DerivedCounters::DeleteGroups(Family& family) {
  std::vector<std::string> keys;
  {
    std::lock_guard lock(family.mutex);
    keys.assign(family.keys.begin(), family.keys.end());
    family.ClearKeys();
  }
  const uint64_t epoch =
      VisitInChunks(engine_.keyspace(), keys,
                    [](engine::View& view, const engine::HashedKey& key) { view.Delete(key); });
  if (epoch != 0) WaitDurable(epoch);
}

std::string_view CounterStateName(CounterState state) {
  switch (state) {
    case CounterState::kCounting:
      return "counting";
    case CounterState::kPending:
      return "pending";
    case CounterState::kBackfilling:
      return "backfilling";
  }
  return "counting";
}

std::vector<CounterListing> DerivedCounters::Counters() const {
  auto catalog = Snapshot();
  // `start` changes under apply_mutex_ held exclusively: read it under the shared lock.
  std::shared_lock apply(apply_mutex_);
  std::vector<CounterListing> listing;
  for (const auto& [name, family] : catalog->counters) {
    CounterListing& item = listing.emplace_back();
    item.name = name;
    item.source = family->counter.source().name;
    item.sql = family->counter.create_sql();
    for (const defs::KeyColumn& column : family->counter.key_columns()) {
      item.key_columns.push_back(fmt::format("{} {}", column.name, defs::TypeName(column.type)));
    }
    if (family->start == kPending) {
      item.state = CounterState::kPending;
    } else if (family->backfilling.load(std::memory_order_acquire)) {
      item.state = CounterState::kBackfilling;
    }
    std::lock_guard lock(family->mutex);
    item.groups = family->keys.size();
  }
  std::ranges::sort(listing, {}, &CounterListing::name);
  return listing;
}

std::vector<SourceListing> DerivedCounters::Sources() const {
  auto catalog = Snapshot();
  std::vector<SourceListing> listing;
  for (const auto& [name, entry] : catalog->sources) listing.push_back({name, entry->sql});
  std::ranges::sort(listing, {}, &SourceListing::name);
  return listing;
}

// ---- Push -----------------------------------------------------------------------------

// The increments of one push, reused across pushes on a thread.
struct DerivedCounters::PushScratch {
  defs::EvalScratch eval;
  std::vector<defs::Increment> increments;
  std::vector<DerivedCounters::Family*> families;  // the family of each increment
  std::vector<size_t> change_end;                  // increments of change i end here
  std::vector<std::string> markers;                // id marker keys
  std::vector<engine::HashedKey> hashed;
  struct Sum {
    int64_t delta;
    DerivedCounters::Family* family;
  };
  absl::flat_hash_map<absl::string_view, Sum> sums;
  absl::flat_hash_set<absl::string_view> seen_ids;
  std::vector<bool> skip;                     // changes not to apply (duplicates)
  std::vector<DecodedChange> stream_changes;  // ApplyTransaction's changes as pushes
};

Status DerivedCounters::RunFormula(const Catalog& catalog, std::span<const DecodedChange> changes,
                                   std::string_view only_counter, int64_t limit,
                                   PushScratch& scratch) {
  scratch.increments.clear();
  scratch.families.clear();
  scratch.change_end.clear();
  for (size_t i = 0; i < changes.size(); ++i) {
    const DecodedChange& change = changes[i];
    const SourceEntry* source = catalog.sources.at(change.source->schema->name).get();
    std::optional<defs::RowView> old_row;
    std::optional<defs::RowView> new_row;
    if (change.old_row) old_row = defs::RowView(*change.old_row);
    if (change.new_row) new_row = defs::RowView(*change.new_row);
    for (const auto& family : source->counters) {
      if (!only_counter.empty() && family->counter.name() != only_counter) continue;
      if (family->start >= limit) continue;  // pending, or the change is in its backfill
      auto status = defs::AppendIncrements(family->counter, old_row, new_row, scratch.eval,
                                           &scratch.increments);
      if (!status) {
        // The row itself is bad (an overflow in an expression is the row's, not a counter's).
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("change {}: {}", i + 1, status.error().message));
      }
      scratch.families.resize(scratch.increments.size(), family.get());
    }
    scratch.change_end.push_back(scratch.increments.size());
  }
  return OkStatus();
}

Status DerivedCounters::WriteSums(engine::View& view, PushScratch& scratch, PushOutcome* outcome) {
  // One sum per key.
  scratch.sums.clear();
  size_t begin = 0;
  for (size_t i = 0; i < scratch.change_end.size(); ++i) {
    const size_t end = scratch.change_end[i];
    if (scratch.skip[i]) {
      ++outcome->duplicates;
      begin = end;
      continue;
    }
    for (size_t j = begin; j < end; ++j) {
      const defs::Increment& increment = scratch.increments[j];
      // A late change to a bucket past retention would bring it back partial: skipped. The
      // clock is read under the keys' locks, so a sweep cannot slip in between.
      const Family& family = *scratch.families[j];
      if (family.counter.KeyExpired(increment.key, view.now_ms() * 1000)) {
        ++outcome->expired;
        continue;
      }
      auto [it, inserted] =
          scratch.sums.try_emplace(Absl(increment.key), PushScratch::Sum{0, scratch.families[j]});
      const std::optional<int64_t> sum = CheckedAdd(it->second.delta, increment.delta);
      if (!sum) {
        return MakeError(ErrorCode::kOverflow,
                         fmt::format("change {}: counter {}: the push would take {} out of the "
                                     "int64 range",
                                     i + 1, scratch.families[j]->counter.name(), increment.key));
      }
      it->second.delta = *sum;
    }
    begin = end;
    ++outcome->applied;
  }

  // Check every result before writing any.
  for (const auto& [stored_key, sum] : scratch.sums) {
    if (sum.delta == 0) continue;
    const std::string_view key(stored_key.data(), stored_key.size());
    const int64_t current = view.Get(engine::HashedKey(key)).value_or(0);
    if (!CheckedAdd(current, sum.delta)) {
      return MakeError(ErrorCode::kOverflow,
                       fmt::format("counter {}: the push would take {} out of the int64 range "
                                   "(now {}, increment {})",
                                   sum.family->counter.name(), key, current, sum.delta));
    }
  }

  // Apply: one write per key, groups back at 0 deleted, the index kept in step.
  for (const auto& [stored_key, sum] : scratch.sums) {
    if (sum.delta == 0) continue;
    const std::string_view key(stored_key.data(), stored_key.size());
    const engine::HashedKey hashed(key);
    const std::optional<int64_t> current = view.Get(hashed);
    const int64_t value = current.value_or(0) + sum.delta;
    Family& family = *sum.family;
    if (value == 0) {
      view.Delete(hashed);
      std::lock_guard lock(family.mutex);
      family.RemoveKey(key);
    } else {
      view.IncrBy(hashed, sum.delta);
      if (!current) {
        std::lock_guard lock(family.mutex);
        family.AddKey(key);
      }
    }
    family.version.fetch_add(1, std::memory_order_relaxed);
    ++outcome->increments;
  }
  return OkStatus();
}

Result<PushOutcome> DerivedCounters::Push(std::string_view body, std::string_view batch_id,
                                          ChangeDecoder& decoder, std::string_view only_counter) {
  thread_local PushScratch scratch;
  std::shared_lock apply(apply_mutex_);
  const std::shared_ptr<const Catalog> catalog = Snapshot();
  auto refuse = [&](Error error) -> Result<PushOutcome> {
    pushes_refused_.fetch_add(1, std::memory_order_relaxed);
    return tl::unexpected(std::move(error));
  };

  auto decoded = decoder.Decode(body, [&](std::string_view name) -> const SourceView* {
    const auto it = catalog->sources.find(Absl(name));
    return it == catalog->sources.end() ? nullptr : &it->second->view;
  });
  if (!decoded) return refuse(decoded.error());
  const std::span<const DecodedChange> changes = *decoded;
  if (!only_counter.empty() && catalog->FindCounter(only_counter) == nullptr) {
    return refuse(UnknownCounter(only_counter));
  }
  if (changes.size() > options_.max_batch_changes) {
    return refuse(Error{ErrorCode::kInvalidArgument,
                        fmt::format("a push holds at most {} changes; this one has {}",
                                    options_.max_batch_changes, changes.size())});
  }
  if (auto status = RunFormula(*catalog, changes, only_counter, kPending, scratch); !status) {
    return refuse(status.error());
  }

  // Lock every key the push may write, and its id markers.
  scratch.markers.clear();
  if (!batch_id.empty()) scratch.markers.push_back(MarkerKey(batch_id));
  for (const DecodedChange& change : changes) {
    if (!change.id.empty()) scratch.markers.push_back(MarkerKey(change.id));
  }
  scratch.hashed.clear();
  for (const defs::Increment& increment : scratch.increments) {
    scratch.hashed.emplace_back(increment.key);
  }
  const size_t first_marker = scratch.hashed.size();
  for (const std::string& marker : scratch.markers) scratch.hashed.emplace_back(marker);
  const std::span<const engine::HashedKey> marker_keys =
      std::span<const engine::HashedKey>(scratch.hashed).subspan(first_marker);

  PushOutcome outcome;
  outcome.changes = changes.size();
  engine::View view = engine_.keyspace().Lock(scratch.hashed);
  size_t next_marker = 0;
  if (!batch_id.empty()) {
    if (view.Exists(marker_keys[next_marker++])) {
      outcome.duplicates = changes.size();
      outcome.required_epoch = view.required_epoch();
      return outcome;
    }
  }
  // Which changes were applied before (or repeat an id within this push).
  scratch.skip.assign(changes.size(), false);
  scratch.seen_ids.clear();
  for (size_t i = 0; i < changes.size(); ++i) {
    if (changes[i].id.empty()) continue;
    const engine::HashedKey& marker = marker_keys[next_marker++];
    scratch.skip[i] = !scratch.seen_ids.insert(Absl(changes[i].id)).second || view.Exists(marker);
  }
  if (auto status = WriteSums(view, scratch, &outcome); !status) return refuse(status.error());

  // The markers, durable with the increments.
  if (outcome.applied > 0 || !batch_id.empty()) {
    engine::SetOptions marker_options;
    marker_options.expiry = engine::ExpiryAction::kSetDeadline;
    marker_options.deadline_ms = view.now_ms() + options_.idempotency_window_ms;
    next_marker = 0;
    if (!batch_id.empty()) view.Set(marker_keys[next_marker++], 1, marker_options);
    for (size_t i = 0; i < changes.size(); ++i) {
      if (changes[i].id.empty()) continue;
      const engine::HashedKey& marker = marker_keys[next_marker++];
      if (!scratch.skip[i]) view.Set(marker, 1, marker_options);
    }
  }
  outcome.required_epoch = view.required_epoch();
  changes_applied_.fetch_add(outcome.applied, std::memory_order_relaxed);
  pushed_changes_applied_.fetch_add(outcome.applied, std::memory_order_relaxed);
  keys_written_.fetch_add(outcome.increments, std::memory_order_relaxed);
  return outcome;
}

// ---- Source streams -------------------------------------------------------------------

namespace {

std::string PositionKey(std::string_view source) {
  std::string key(kPositionPrefix);
  key.append(source);
  return key;
}

}  // namespace

int64_t DerivedCounters::SourcePosition(std::string_view source) {
  const std::string key = PositionKey(source);
  const engine::HashedKey hashed(key);
  engine::View view = engine_.keyspace().Lock(hashed);
  return view.Get(hashed).value_or(0);
}

std::vector<bool> DerivedCounters::ColumnsRead(std::string_view source) const {
  auto catalog = Snapshot();
  const auto it = catalog->sources.find(Absl(source));
  if (it == catalog->sources.end()) return {};
  std::vector<bool> read;
  for (const std::string& reader : it->second->view.read_by) read.push_back(!reader.empty());
  return read;
}

std::optional<defs::SourceSchema> DerivedCounters::SourceSchemaOf(std::string_view source) const {
  auto catalog = Snapshot();
  const auto it = catalog->sources.find(Absl(source));
  if (it == catalog->sources.end()) return std::nullopt;
  return it->second->schema;
}

Result<PushOutcome> DerivedCounters::ApplyTransaction(std::string_view source,
                                                      std::span<const SourceRowChange> changes,
                                                      int64_t position) {
  const SourceTransactionPart part{source, changes};
  return ApplyTransaction({&part, 1}, position);
}

Result<PushOutcome> DerivedCounters::ApplyTransaction(std::span<const SourceTransactionPart> parts,
                                                      int64_t position) {
  return ApplyParts(parts, position, {});
}

Result<PushOutcome> DerivedCounters::ApplyParts(std::span<const SourceTransactionPart> parts,
                                                int64_t position, std::string_view only_counter) {
  thread_local PushScratch scratch;
  // Counters whose start is at or above this skip the transaction (a backfill chunk skips
  // only pending counters).
  const int64_t limit = position == 0 ? kPending : position;
  if (position != 0) {
    // A verification hold below this transaction: wait (the hold is now reached).
    std::unique_lock lock(hold_mutex_);
    while (hold_.held && position > hold_.position) {
      hold_.reached = true;
      hold_changed_.notify_all();
      hold_changed_.wait(lock);
    }
  }
  std::shared_lock apply(apply_mutex_);
  const std::shared_ptr<const Catalog> catalog = Snapshot();
  std::vector<const SourceEntry*> entries;
  std::vector<std::string> position_keys;
  bool truncates = false;
  for (const SourceTransactionPart& part : parts) {
    const auto entry = catalog->sources.find(Absl(part.source));
    if (entry == catalog->sources.end()) {
      return MakeError(ErrorCode::kNotFound, fmt::format("source {} does not exist", part.source));
    }
    entries.push_back(entry->second.get());
    position_keys.push_back(PositionKey(part.source));
    truncates = truncates || std::ranges::any_of(part.changes, &SourceRowChange::truncate);
  }
  // Every change as a push would carry it, part after part.
  auto as_pushes = [&](size_t part, size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) {
      const SourceRowChange& change = parts[part].changes[j];
      if (change.truncate) continue;
      DecodedChange& decoded = scratch.stream_changes.emplace_back();
      decoded.source = &entries[part]->view;
      decoded.old_row = change.old_row;
      decoded.new_row = change.new_row;
    }
  };
  scratch.stream_changes.clear();
  for (size_t i = 0; i < parts.size(); ++i) as_pushes(i, 0, parts[i].changes.size());
  if (auto status = RunFormula(*catalog, scratch.stream_changes, only_counter, limit, scratch);
      !status) {
    return tl::unexpected(status.error());
  }
  // A TRUNCATE deletes groups it cannot name in advance: such a transaction holds every
  // stripe. Otherwise only the stripes of its keys and positions.
  scratch.hashed.clear();
  for (const defs::Increment& increment : scratch.increments) {
    scratch.hashed.emplace_back(increment.key);
  }
  for (const std::string& key : position_keys) scratch.hashed.emplace_back(key);
  engine::View view =
      truncates ? engine_.keyspace().LockAll() : engine_.keyspace().Lock(scratch.hashed);

  PushOutcome outcome;
  std::vector<bool> due(parts.size(), true);
  for (size_t i = 0; i < parts.size(); ++i) {
    outcome.changes += parts[i].changes.size();
    const engine::HashedKey hashed(position_keys[i]);
    due[i] = position == 0 || view.Get(hashed).value_or(0) < position;  // else counted before
  }
  if (!truncates) {
    // The common case: the formula already ran over every change; skip the parts counted
    // before.
    scratch.skip.clear();
    for (size_t i = 0; i < parts.size(); ++i) {
      scratch.skip.resize(scratch.skip.size() + parts[i].changes.size(), !due[i]);
    }
    if (auto status = WriteSums(view, scratch, &outcome); !status) {
      return tl::unexpected(status.error());
    }
  }
  // With a TRUNCATE: in order, part by part; within a part, the changes before the TRUNCATE
  // count, then every group of the source goes, then the changes after it count.
  for (size_t i = 0; i < parts.size() && truncates; ++i) {
    if (!due[i]) {
      outcome.duplicates += parts[i].changes.size();
      continue;
    }
    const std::span<const SourceRowChange> changes = parts[i].changes;
    size_t begin = 0;
    for (size_t end = 0; end <= changes.size(); ++end) {
      if (end < changes.size() && !changes[end].truncate) continue;
      scratch.stream_changes.clear();
      as_pushes(i, begin, end);
      if (auto status = RunFormula(*catalog, scratch.stream_changes, only_counter, limit, scratch);
          !status) {
        return tl::unexpected(status.error());
      }
      scratch.skip.assign(scratch.stream_changes.size(), false);
      if (auto status = WriteSums(view, scratch, &outcome); !status) {
        return tl::unexpected(status.error());
      }
      if (end < changes.size()) {
        for (const auto& family : entries[i]->counters) {
          if (family->start >= limit) continue;  // its backfill's snapshot is after this
          if (!only_counter.empty() && family->counter.name() != only_counter) continue;
          std::lock_guard lock(family->mutex);
          for (const std::string& key : family->keys) view.Delete(engine::HashedKey(key));
          family->ClearKeys();
          family->version.fetch_add(1, std::memory_order_relaxed);
        }
        ++outcome.applied;
      }
      begin = end + 1;
    }
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (due[i] && position != 0) view.Set(engine::HashedKey(position_keys[i]), position, {});
  }
  outcome.required_epoch = view.required_epoch();
  changes_applied_.fetch_add(outcome.applied, std::memory_order_relaxed);
  source_changes_applied_.fetch_add(outcome.applied, std::memory_order_relaxed);
  keys_written_.fetch_add(outcome.increments, std::memory_order_relaxed);
  return outcome;
}

Status DerivedCounters::Hold(int64_t position) {
  std::lock_guard lock(hold_mutex_);
  if (hold_.held) {
    return MakeError(ErrorCode::kUnavailable,
                     "another verification holds the sources (COUNTER.RELEASE ends it)");
  }
  hold_ = HoldState{true, position, false};
  return OkStatus();
}

void DerivedCounters::MarkStreamAt(int64_t position) {
  std::lock_guard lock(hold_mutex_);
  if (hold_.held && position >= hold_.position && !hold_.reached) {
    hold_.reached = true;
    hold_changed_.notify_all();
  }
}

HoldState DerivedCounters::hold_state() const {
  std::lock_guard lock(hold_mutex_);
  return hold_;
}

void DerivedCounters::Release() {
  std::lock_guard lock(hold_mutex_);
  hold_ = HoldState{};
  hold_changed_.notify_all();
}

Result<uint64_t> DerivedCounters::Repair(std::string_view counter,
                                         std::span<const KeyValue> values) {
  std::shared_lock apply(apply_mutex_);
  auto catalog = Snapshot();
  const auto it = catalog->counters.find(Absl(counter));
  if (it == catalog->counters.end()) return tl::unexpected(UnknownCounter(counter));
  Family& family = *it->second;
  const std::string prefix = std::string(counter) + ":";
  std::vector<engine::HashedKey> hashed;
  for (const KeyValue& item : values) {
    if (!item.key.starts_with(prefix)) {
      return InvalidArgument(
          fmt::format("key '{}' is not a group of counter {}", item.key.substr(0, 128), counter));
    }
    hashed.emplace_back(item.key);
  }
  engine::View view = engine_.keyspace().Lock(hashed);
  for (size_t i = 0; i < values.size(); ++i) {
    std::lock_guard lock(family.mutex);
    if (values[i].value == 0) {
      view.Delete(hashed[i]);
      family.RemoveKey(values[i].key);
    } else {
      view.Set(hashed[i], values[i].value, engine::SetOptions{});
      family.AddKey(values[i].key);
    }
  }
  family.version.fetch_add(1, std::memory_order_relaxed);
  return view.required_epoch();
}

Status DerivedCounters::ResetSource(std::string_view source) {
  std::unique_lock ddl(apply_mutex_);
  auto catalog = Snapshot();
  const auto entry = catalog->sources.find(Absl(source));
  if (entry == catalog->sources.end()) {
    return MakeError(ErrorCode::kNotFound, fmt::format("source {} does not exist", source));
  }
  // Every counter of the source is counted again by the caller's backfill, pending ones too.
  std::vector<engine::Persistence::CatalogOp> ops;
  for (const auto& family : entry->second->counters) {
    DeleteGroups(*family);
    if (family->start != 0) {
      ops.push_back({std::string(kStartRecord) + family->counter.name(), std::nullopt});
      ops.push_back({std::string(kBackfillRecord) + family->counter.name(), std::nullopt});
    }
  }
  if (!ops.empty()) {
    if (auto status = store_.WriteCatalog(ops); !status) return status;
    for (const auto& family : entry->second->counters) {
      family->start = 0;
      family->backfilling.store(false, std::memory_order_relaxed);
    }
  }
  const std::string position_key = PositionKey(source);
  const engine::HashedKey hashed(position_key);
  uint64_t epoch = 0;
  {
    engine::View view = engine_.keyspace().Lock(hashed);
    view.Delete(hashed);
    epoch = view.required_epoch();
  }
  if (epoch != 0) WaitDurable(epoch);
  return OkStatus();
}

// ---- Backfill of a counter added mid-stream ---------------------------------------------

void DerivedCounters::MarkStreamed(std::string_view source) {
  std::unique_lock ddl(apply_mutex_);
  streamed_.insert(std::string(source));
}

bool DerivedCounters::IsStreamed(std::string_view source) const {
  return every_source_streamed_ || streamed_.contains(Absl(source));
}

void DerivedCounters::MarkEverySourceStreamed() {
  std::unique_lock ddl(apply_mutex_);
  every_source_streamed_ = true;
}

std::vector<std::string> DerivedCounters::PendingCounters(std::string_view source) const {
  auto catalog = Snapshot();
  std::vector<std::string> names;
  const auto entry = catalog->sources.find(Absl(source));
  if (entry == catalog->sources.end()) return names;
  // `start` changes under apply_mutex_ held exclusively: read it under the shared lock.
  std::shared_lock apply(apply_mutex_);
  for (const auto& family : entry->second->counters) {
    if (family->start == kPending) names.push_back(family->counter.name());
  }
  return names;
}

Result<int64_t> DerivedCounters::CounterStart(std::string_view name) const {
  auto catalog = Snapshot();
  const Family* family = catalog->FindCounter(name);
  if (family == nullptr) return tl::unexpected(UnknownCounter(name));
  std::shared_lock apply(apply_mutex_);
  return family->start;
}

Result<bool> DerivedCounters::ActivateCounter(std::string_view name, int64_t position) {
  std::unique_lock ddl(apply_mutex_);
  auto catalog = Snapshot();
  const auto it = catalog->counters.find(Absl(name));
  if (it == catalog->counters.end()) return tl::unexpected(UnknownCounter(name));
  Family& family = *it->second;
  if (family.start != kPending) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("counter {} is not waiting for a backfill", name));
  }
  // A transaction above `position` may already be applied without this counter: the
  // snapshot would then miss it for good.
  if (SourcePosition(family.counter.source().name) > position) return false;
  const std::array<engine::Persistence::CatalogOp, 2> ops{{
      {std::string(kStartRecord) + std::string(name), std::to_string(position)},
      {std::string(kBackfillRecord) + std::string(name), std::string()},
  }};
  if (auto status = store_.WriteCatalog(ops); !status) return tl::unexpected(status.error());
  family.start = position;
  family.backfilling.store(true, std::memory_order_relaxed);
  return true;
}

Result<PushOutcome> DerivedCounters::ApplyBackfill(std::string_view counter,
                                                   std::span<const SourceRowChange> rows) {
  std::string source;
  {
    auto catalog = Snapshot();
    const Family* family = catalog->FindCounter(counter);
    if (family == nullptr) return tl::unexpected(UnknownCounter(counter));
    source = family->counter.source().name;
  }
  const SourceTransactionPart part{source, rows};
  return ApplyParts({&part, 1}, 0, counter);
}

Status DerivedCounters::FinishBackfill(std::string_view name) {
  const engine::Persistence::CatalogOp op{std::string(kBackfillRecord) + std::string(name),
                                          std::nullopt};
  if (auto status = store_.WriteCatalog({&op, 1}); !status) return status;
  auto catalog = Snapshot();
  if (const auto it = catalog->counters.find(Absl(name)); it != catalog->counters.end()) {
    // Release: whoever sees the counter counting sees every backfilled row applied.
    it->second->backfilling.store(false, std::memory_order_release);
  }
  return OkStatus();
}

Status DerivedCounters::ResetCounter(std::string_view name) {
  std::unique_lock ddl(apply_mutex_);
  auto catalog = Snapshot();
  const auto it = catalog->counters.find(Absl(name));
  if (it == catalog->counters.end()) return tl::unexpected(UnknownCounter(name));
  Family& family = *it->second;
  DeleteGroups(family);
  const bool pending = IsStreamed(family.counter.source().name);
  const std::array<engine::Persistence::CatalogOp, 2> ops{{
      {std::string(kStartRecord) + std::string(name),
       pending ? std::optional<std::string>(std::string(kPendingValue)) : std::nullopt},
      {std::string(kBackfillRecord) + std::string(name), std::nullopt},
  }};
  if (auto status = store_.WriteCatalog(ops); !status) return status;
  family.start = pending ? kPending : 0;
  family.backfilling.store(false, std::memory_order_relaxed);
  family.version.fetch_add(1, std::memory_order_relaxed);
  return OkStatus();
}

// ---- Reads ----------------------------------------------------------------------------

namespace {

// Key column `column` of `counter` as a client spells it (ParseKeyPart).
Result<defs::Value> ParsePart(const defs::CompiledCounter& counter, size_t column,
                              std::string_view text) {
  const defs::KeyColumn& key = counter.key_columns()[column];
  auto value = ParseKeyPart(key.type, text);
  if (!value) {
    return InvalidArgument(fmt::format("counter {}, key part {} ({} {}): {}", counter.name(),
                                       column + 1, key.name, defs::TypeName(key.type),
                                       value.error().message));
  }
  return *value;
}

Result<std::vector<defs::Value>> ParseParts(const defs::CompiledCounter& counter,
                                            std::span<const std::string_view> parts) {
  std::vector<defs::Value> values;
  values.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    auto value = ParsePart(counter, i, parts[i]);
    if (!value) return tl::unexpected(value.error());
    values.push_back(*value);
  }
  return values;
}

// An instant of a range read: Unix seconds (an optional '-' and digits only), or a
// timestamp as ParseKeyPart reads one (ISO 8601 or the key spelling). Eight digits
// without a sign are refused: they read as an ISO 8601 basic date ("20240501") as much as
// Unix seconds (of 1970-1973), and taking them as seconds would silently mean 1970.
Result<int64_t> ParseInstant(std::string_view name, std::string_view text) {
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  if (!digits.empty() && std::ranges::all_of(digits, [](char c) { return c >= '0' && c <= '9'; })) {
    if (text.size() == 8) {
      return InvalidArgument(fmt::format(
          "{} \"{}\" is ambiguous: 8 digits read as a date (YYYYMMDD) or as Unix seconds of "
          "1970-1973; write the date as {}-{}-{} or {}T000000Z, an instant of 1970-1973 in "
          "ISO 8601",
          name, text, text.substr(0, 4), text.substr(4, 2), text.substr(6, 2), text));
    }
    int64_t seconds = 0;
    int64_t micros = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seconds);
    if (error == std::errc() && end == text.data() + text.size() &&
        !__builtin_mul_overflow(seconds, defs::kMicrosPerSecond, &micros)) {
      return micros;
    }
  } else if (auto value = ParseKeyPart(defs::Type::kTimestamp, text); value && !value->is_null()) {
    return value->i;
  }
  return InvalidArgument(fmt::format(
      "{} \"{}\" is not an instant: write 2024-05-01T00:00:00Z, 20240501T000000Z or Unix "
      "seconds",
      name, text.substr(0, 64)));
}

// True when FormatTimestamp spells `micros` in the fixed width "YYYYMMDDTHHMMSSZ" (years
// 0-9999, whole seconds): among such spellings byte order is time order.
bool FixedWidthTimestamp(int64_t micros) {
  constexpr int64_t kYear0 = defs::DaysFromCivil(0, 1, 1) * defs::kMicrosPerDay;
  constexpr int64_t kYear10000 = defs::DaysFromCivil(10000, 1, 1) * defs::kMicrosPerDay;
  return micros >= kYear0 && micros < kYear10000 && micros % defs::kMicrosPerSecond == 0;
}

}  // namespace

Result<std::string> DerivedCounters::KeyOf(std::string_view counter,
                                           std::span<const std::string_view> parts) const {
  auto catalog = Snapshot();
  const Family* family = catalog->FindCounter(counter);
  if (family == nullptr) return tl::unexpected(UnknownCounter(counter));
  const size_t columns = family->counter.key_columns().size();
  if (parts.size() != columns) {
    return InvalidArgument(
        fmt::format("counter {} has {} key parts; {} given", counter, columns, parts.size()));
  }
  auto values = ParseParts(family->counter, parts);
  if (!values) return tl::unexpected(values.error());
  return defs::EncodeKey(family->counter.name(), *values);
}

Result<std::string> DerivedCounters::PrefixOf(std::string_view counter,
                                              std::span<const std::string_view> parts) const {
  auto catalog = Snapshot();
  const Family* family = catalog->FindCounter(counter);
  if (family == nullptr) return tl::unexpected(UnknownCounter(counter));
  const size_t columns = family->counter.key_columns().size();
  if (parts.size() >= columns && columns > 0) {
    return InvalidArgument(
        fmt::format("counter {} has {} key parts: a prefix names fewer ({} given)", counter,
                    columns, parts.size()));
  }
  auto values = ParseParts(family->counter, parts);
  if (!values) return tl::unexpected(values.error());
  // Ends with an unescaped ':', so it matches whole parts only.
  return defs::EncodeKey(family->counter.name(), *values) + ":";
}

std::vector<int64_t> DerivedCounters::Get(std::span<const std::string> keys,
                                          uint64_t* required_epoch) {
  std::vector<int64_t> values;
  values.reserve(keys.size());
  const uint64_t epoch = VisitInChunks(engine_.keyspace(), keys,
                                       [&](engine::View& view, const engine::HashedKey& key) {
                                         values.push_back(view.Get(key).value_or(0));
                                       });
  *required_epoch = std::max(*required_epoch, epoch);
  return values;
}

Result<Page> DerivedCounters::List(std::string_view counter, std::string_view prefix,
                                   std::string_view cursor, size_t limit) {
  auto catalog = Snapshot();
  const auto it = catalog->counters.find(Absl(counter));
  if (it == catalog->counters.end()) return tl::unexpected(UnknownCounter(counter));
  Family& family = *it->second;
  if (!cursor.empty() && !cursor.starts_with(prefix)) {
    return InvalidArgument("the cursor does not belong to this listing");
  }
  std::vector<std::string> keys;
  Page page;
  {
    std::lock_guard lock(family.mutex);
    auto key = cursor.empty() ? family.keys.lower_bound(Absl(prefix))
                              : family.keys.upper_bound(Absl(cursor));
    for (; key != family.keys.end() && key->starts_with(prefix); ++key) {
      if (keys.size() == limit) {
        page.next_cursor = keys.back();
        break;
      }
      keys.push_back(*key);
    }
  }
  const std::vector<int64_t> values = Get(keys, &page.required_epoch);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (values[i] != 0) page.items.push_back({std::move(keys[i]), values[i]});
  }
  return page;
}

Result<Page> DerivedCounters::Top(std::string_view counter, std::string_view prefix, size_t k) {
  auto catalog = Snapshot();
  const auto it = catalog->counters.find(Absl(counter));
  if (it == catalog->counters.end()) return tl::unexpected(UnknownCounter(counter));
  Family& family = *it->second;
  const int64_t now = engine_.keyspace().clock()->NowMillis();
  const std::string cache_key = fmt::format("{}\n{}", prefix, k);
  const uint64_t version = family.version.load(std::memory_order_acquire);
  {
    std::lock_guard lock(family.mutex);
    const auto cached = family.top_cache.find(cache_key);
    if (cached != family.top_cache.end() &&
        (cached->second.version == version ||
         now - cached->second.computed_ms < options_.top_k_max_staleness_ms)) {
      return cached->second.page;
    }
  }
  // A min-heap of the k best seen so far: the worst on top.
  auto better = [](const KeyValue& a, const KeyValue& b) {
    return a.value != b.value ? a.value > b.value : a.key < b.key;
  };
  std::priority_queue<KeyValue, std::vector<KeyValue>, decltype(better)> best(better);
  Page page;
  std::string cursor;
  while (true) {
    auto chunk = List(counter, prefix, cursor, kChunk);
    if (!chunk) return chunk;
    page.required_epoch = std::max(page.required_epoch, chunk->required_epoch);
    for (KeyValue& item : chunk->items) {
      if (best.size() < k) {
        best.push(std::move(item));
      } else if (better(item, best.top())) {
        best.pop();
        best.push(std::move(item));
      }
    }
    if (chunk->next_cursor.empty()) break;
    cursor = std::move(chunk->next_cursor);
  }
  page.items.resize(best.size());
  for (size_t i = best.size(); i-- > 0;) {
    page.items[i] = best.top();
    best.pop();
  }
  std::lock_guard lock(family.mutex);
  if (family.top_cache.size() >= kTopCacheEntries) family.top_cache.clear();
  family.top_cache[cache_key] = Family::TopEntry{version, now, page};
  return page;
}

Result<RangeSum> DerivedCounters::Range(std::string_view counter,
                                        std::span<const std::string_view> parts,
                                        std::string_view from_text, std::string_view to_text) {
  auto catalog = Snapshot();
  const auto it = catalog->counters.find(Absl(counter));
  if (it == catalog->counters.end()) return tl::unexpected(UnknownCounter(counter));
  Family& family = *it->second;
  const defs::CompiledCounter& compiled = family.counter;
  const std::optional<defs::TimeBucket>& bucket = compiled.time_bucket();
  if (!bucket) {
    return InvalidArgument(fmt::format(
        "counter {} has no time bucket: a range read needs exactly one date_trunc(...) key "
        "column",
        counter));
  }
  const std::vector<defs::KeyColumn>& columns = compiled.key_columns();
  if (parts.size() + 1 != columns.size()) {
    std::string names;
    for (size_t i = 0; i < columns.size(); ++i) {
      if (i == bucket->column) continue;
      names += fmt::format("{}{}", names.empty() ? "" : ", ", columns[i].name);
    }
    return InvalidArgument(
        fmt::format("counter {} has {} key part{} besides its time bucket {}{}{}; {} given",
                    counter, columns.size() - 1, columns.size() == 2 ? "" : "s",
                    columns[bucket->column].name, names.empty() ? "" : ": ", names, parts.size()));
  }
  // The group's values, the bucket's slot filled per candidate below.
  std::vector<defs::Value> values(columns.size());
  for (size_t i = 0, part = 0; i < columns.size(); ++i) {
    if (i == bucket->column) continue;
    auto value = ParsePart(compiled, i, parts[part++]);
    if (!value) return tl::unexpected(value.error());
    values[i] = *value;
  }
  auto from = ParseInstant("from", from_text);
  if (!from) return tl::unexpected(from.error());
  auto to = ParseInstant("to", to_text);
  if (!to) return tl::unexpected(to.error());
  if (*from > *to) {
    return InvalidArgument(fmt::format("the range is backwards: from {} is after to {}",
                                       defs::FormatTimestamp(*from), defs::FormatTimestamp(*to)));
  }

  // The group's buckets lie under the prefix of the key columns before the bucket; with
  // fixed-width instants the scan starts at `from` and stops at `to` in byte order.
  const std::string prefix =
      defs::EncodeKey(compiled.name(), std::span(values.data(), bucket->column)) + ":";
  const std::string low =
      FixedWidthTimestamp(*from) ? prefix + defs::FormatTimestamp(*from) : prefix;
  const std::string stop = FixedWidthTimestamp(*to) ? prefix + defs::FormatTimestamp(*to) : "";
  const int64_t now = engine_.keyspace().clock()->NowMillis() * 1000;
  std::vector<std::string> keys;
  std::string expected;
  {
    std::lock_guard lock(family.mutex);
    for (auto key = family.keys.lower_bound(Absl(low));
         key != family.keys.end() && key->starts_with(prefix); ++key) {
      if (!stop.empty() && *key >= stop) break;
      const std::optional<int64_t> start = compiled.BucketOfKey(*key);
      if (!start || *start < *from || *start >= *to || compiled.KeyExpired(*key, now)) continue;
      // Under the prefix, but another group's when the bucket is not the last column.
      values[bucket->column] = defs::Value::Timestamp(*start);
      expected.clear();
      defs::AppendKey(compiled.name(), values, &expected);
      if (expected == *key) keys.push_back(*key);
    }
  }
  RangeSum out;
  const std::vector<int64_t> found = Get(keys, &out.required_epoch);
  for (const int64_t value : found) {
    if (value == 0) continue;
    const std::optional<int64_t> sum = CheckedAdd(out.sum, value);
    if (!sum) {
      return MakeError(
          ErrorCode::kOverflow,
          fmt::format("the sum of counter {} from {} to {} is out of the int64 range", counter,
                      defs::FormatTimestamp(*from), defs::FormatTimestamp(*to)));
    }
    out.sum = *sum;
    ++out.buckets;
  }
  return out;
}

// ---- Retention --------------------------------------------------------------------------

size_t DerivedCounters::SweepRetention(size_t budget) {
  std::lock_guard sweeping(sweep_mutex_);
  size_t removed = 0;
  uint64_t epoch = 0;
  {
    std::shared_lock apply(apply_mutex_);  // no DDL meanwhile: the families stay
    auto catalog = Snapshot();
    const int64_t now = engine_.keyspace().clock()->NowMillis() * 1000;
    // The families with a retention by name, taken in turn from the one after the family
    // the previous sweep last removed from: one with more expired groups than the budget
    // cannot keep the others waiting.
    std::vector<Family*> families;
    for (const auto& [name, family] : catalog->counters) {
      if (family->counter.retention()) families.push_back(family.get());
    }
    std::ranges::sort(families, {}, [](const Family* f) { return f->counter.name(); });
    const auto after = std::ranges::upper_bound(families, sweep_after_, {},
                                                [](const Family* f) { return f->counter.name(); });
    const size_t first = static_cast<size_t>(after - families.begin());
    std::vector<std::string> expired;
    std::vector<engine::HashedKey> hashed;
    for (size_t turn = 0; turn < families.size() && removed < budget; ++turn) {
      Family& family = *families[(first + turn) % families.size()];
      while (removed < budget) {
        // The oldest groups first, a chunk at a time; the first live bucket ends the family.
        expired.clear();
        {
          std::lock_guard lock(family.mutex);
          const size_t most = std::min(kChunk, budget - removed);
          for (auto it = family.by_bucket.begin();
               it != family.by_bucket.end() && expired.size() < most; ++it) {
            if (!family.counter.Expired(it->first, now)) break;
            expired.push_back(it->second);
          }
        }
        if (expired.empty()) break;
        hashed.clear();
        for (const std::string& key : expired) hashed.emplace_back(key);
        engine::View view = engine_.keyspace().Lock(hashed);
        for (const engine::HashedKey& key : hashed) view.Delete(key);
        {
          std::lock_guard lock(family.mutex);
          for (const std::string& key : expired) family.RemoveKey(key);
        }
        family.version.fetch_add(1, std::memory_order_relaxed);
        epoch = std::max(epoch, view.required_epoch());
        removed += expired.size();
        sweep_after_ = family.counter.name();
      }
    }
  }
  if (epoch != 0) WaitDurable(epoch);
  return removed;
}

void DerivedCounters::StartRetentionSweeper() {
  if (sweeper_ != nullptr) sweeper_->Start();
}

void DerivedCounters::StopRetentionSweeper() {
  if (sweeper_ != nullptr) sweeper_->Stop();
}

void DerivedCounters::OnFlushAll() {
  auto catalog = Snapshot();
  for (const auto& [name, family] : catalog->counters) {
    std::lock_guard lock(family->mutex);
    family->ClearKeys();
    family->version.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace tally::derived
