#include "engine/derived/catalog.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

#include "core/integer.h"
#include "engine/definitions/compiler.h"
#include "engine/definitions/parser.h"
#include "engine/derived/catalog_records.h"

namespace tally::derived {

namespace defs = tally::definitions;

namespace {

// Keys visited per step of the keyspace scans of Load and CREATE COUNTER.
constexpr size_t kScanStep = 65536;

// Looks sources up in `catalog`, for the compiler.
defs::Catalog SchemaLookup(const CatalogSnapshot& catalog) {
  return [&catalog](std::string_view source) -> const defs::SourceSchema* {
    const SourceEntry* entry = catalog.FindSource(source);
    return entry == nullptr ? nullptr : &entry->schema;
  };
}

// The start a "start/<name>" record holds: kPendingStart or a position.
Result<int64_t> ParseStart(std::string_view record, const std::string& value) {
  if (value == kPendingStartValue) return kPendingStart;
  if (std::optional<int64_t> position = ParseInt64(value)) return *position;
  return Corruption(fmt::format("catalog record {}: '{}' is not a position", record, value));
}

}  // namespace

// The names of the defined (or still dropping) counters.
struct Catalog::NameSet {
  absl::flat_hash_set<std::string> names;
};

Catalog::Catalog(engine::Persistence& store, DerivedKeyspace& keyspace)
    : store_(store), keyspace_(keyspace), snapshot_(std::make_shared<CatalogSnapshot>()) {}

Catalog::~Catalog() { delete protected_names_.load(); }

std::shared_ptr<const CatalogSnapshot> Catalog::Snapshot() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

void Catalog::Install(std::shared_ptr<const CatalogSnapshot> catalog) {
  auto names = std::make_unique<NameSet>();
  for (const auto& [name, family] : catalog->counters) names->names.insert(name);
  for (const std::string& name : catalog->dropping) names->names.insert(name);
  std::lock_guard lock(mutex_);
  snapshot_ = std::move(catalog);
  const NameSet* old = protected_names_.exchange(names.release(), std::memory_order_acq_rel);
  if (old != nullptr) retired_names_.emplace_back(old);
}

bool Catalog::IsProtectedKey(std::string_view key) const {
  if (IsInternalKey(key)) return true;
  const NameSet* names = protected_names_.load(std::memory_order_acquire);
  if (names == nullptr || names->names.empty()) return false;
  const std::string_view family = FamilyName(key);
  return !family.empty() && names->names.contains(Absl(family));
}

std::string Catalog::ProtectedKeyError(std::string_view key) const {
  if (IsInternalKey(key)) {
    return "ERR keys that start with \\x00id:, \\x00pos: or \\x00agg: are tally's own records "
           "(idempotency markers, source positions, the hidden state of derived counters)";
  }
  return fmt::format(
      "ERR key '{}' belongs to the derived counter '{}': it changes only through pushed "
      "changes (COUNTER.PUSH, POST /v1/changes)",
      key.substr(0, 128), FamilyName(key));
}

// ---- Load -----------------------------------------------------------------------------

void Catalog::LoadRecords(const CatalogSnapshot& catalog, std::span<const std::string> records,
                          std::vector<std::string>* orphans) {
  uint64_t epoch = 0;
  const std::vector<int64_t> values = keyspace_.Get(records, &epoch);
  for (size_t i = 0; i < records.size(); ++i) {
    const auto name = ParseRecordKey(records[i]);
    Family* family = name ? catalog.FindCounter(FamilyName(name->group)) : nullptr;
    if (family == nullptr || family->states == nullptr || !family->IsGroupKey(name->group) ||
        name->aggregate >= family->counter.aggregates().size()) {
      orphans->push_back(records[i]);
      continue;
    }
    std::lock_guard lock(family->mutex);
    family->states->SetRecord(name->group, name->aggregate, name->kind, name->value, values[i]);
  }
}

Result<std::vector<std::shared_ptr<Family>>> Catalog::Load() {
  auto records = store_.ReadCatalog();
  if (!records) return tl::unexpected(records.error());
  auto catalog = std::make_shared<CatalogSnapshot>();
  // Sources first: counters are compiled against them.
  for (const auto& [name, sql] : *records) {
    if (!name.starts_with(kSourceRecord)) continue;
    auto statement = defs::ParseStatement(sql);
    const auto* create = statement ? std::get_if<defs::CreateSource>(&*statement) : nullptr;
    if (create == nullptr) {
      return Corruption(fmt::format("catalog record {} is not a CREATE SOURCE", name));
    }
    auto schema = defs::CompileSource(*create);
    if (!schema) {
      return Corruption(fmt::format("catalog record {}: {}", name, schema.error().message));
    }
    auto entry = std::make_shared<SourceEntry>();
    entry->schema = std::move(*schema);
    entry->sql = sql;
    catalog->sources.emplace(entry->schema.name, std::move(entry));
  }
  const defs::Catalog lookup = SchemaLookup(*catalog);
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
      Family* family = catalog->FindCounter(std::string_view(name).substr(kStartRecord.size()));
      if (family == nullptr) continue;
      auto start = ParseStart(name, value);
      if (!start) return tl::unexpected(start.error());
      family->start = *start;
    } else if (name.starts_with(kBackfillRecord)) {
      const auto it =
          catalog->counters.find(Absl(std::string_view(name).substr(kBackfillRecord.size())));
      if (it != catalog->counters.end()) interrupted.push_back(it->second);
    }
  }

  // The family indexes, from one pass over the keyspace.
  std::vector<std::string> keys;
  std::vector<std::string> orphans;  // groups of interrupted drops
  std::vector<std::string> hidden;   // hidden records of groups (aggregate_state.h)
  uint64_t cursor = 0;
  do {
    keys.clear();
    cursor = keyspace_.keyspace().Scan(cursor, kScanStep, nullptr, &keys);
    for (std::string& key : keys) {
      if (key.starts_with(kRecordPrefix)) {
        hidden.push_back(std::move(key));
        continue;
      }
      const std::string_view name = FamilyName(key);
      if (Family* family = catalog->FindCounter(name)) {
        if (!family->IsGroupKey(key)) continue;
        std::lock_guard lock(family->mutex);
        family->AddKey(key);
      } else if (catalog->dropping.contains(Absl(name))) {
        orphans.push_back(std::move(key));
      }
    }
  } while (cursor != 0);
  LoadRecords(*catalog, hidden, &orphans);

  Install(catalog->Rebuilt());
  keyspace_.DeleteKeys(orphans);
  if (!catalog->dropping.empty()) {
    std::vector<engine::Persistence::CatalogOp> ops;
    for (const std::string& name : catalog->dropping) {
      ops.push_back({RecordName(kDroppingRecord, name), std::nullopt});
      spdlog::info("finished dropping counter {}", name);
    }
    if (auto status = store_.WriteCatalog(ops); !status) return tl::unexpected(status.error());
    auto next = Snapshot()->Rebuilt();
    next->dropping.clear();
    Install(std::move(next));
  }
  return interrupted;
}

// ---- DDL ------------------------------------------------------------------------------

Result<std::string> Catalog::Execute(const defs::Statement& statement,
                                     const StartsPending& starts_pending, int64_t start_at) {
  return std::visit(
      [&](const auto& s) -> Result<std::string> {
        using T = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<T, defs::CreateSource>) return CreateSource(s);
        if constexpr (std::is_same_v<T, defs::DropSource>) return DropSource(s);
        if constexpr (std::is_same_v<T, defs::CreateCounter>) {
          return CreateCounter(s, starts_pending, start_at);
        }
        if constexpr (std::is_same_v<T, defs::DropCounter>) return DropCounter(s.name);
        return std::string();
      },
      statement);
}

Result<std::string> Catalog::CreateSource(const defs::CreateSource& create) {
  auto schema = defs::CompileSource(create);
  if (!schema) return tl::unexpected(schema.error());
  const std::string sql = defs::SourceSql(*schema);
  auto catalog = Snapshot();
  if (const SourceEntry* existing = catalog->FindSource(schema->name)) {
    if (existing->sql == sql) return fmt::format("CREATE SOURCE {} (unchanged)", schema->name);
    return InvalidArgument(fmt::format(
        "source {} already exists with other columns; DROP SOURCE it first (its counters "
        "too)",
        schema->name));
  }
  const engine::Persistence::CatalogOp op{RecordName(kSourceRecord, schema->name), sql};
  if (auto status = store_.WriteCatalog({&op, 1}); !status) return tl::unexpected(status.error());
  auto next = std::make_shared<CatalogSnapshot>(*catalog);
  auto entry = std::make_shared<SourceEntry>();
  entry->sql = sql;
  entry->schema = std::move(*schema);
  const std::string name = entry->schema.name;
  next->sources.emplace(name, std::move(entry));
  Install(next->Rebuilt());
  return fmt::format("CREATE SOURCE {}", name);
}

Result<std::string> Catalog::DropSource(const defs::DropSource& drop) {
  auto catalog = Snapshot();
  const SourceEntry* entry = catalog->FindSource(drop.name);
  if (entry == nullptr) {
    return InvalidArgument(fmt::format("line {}, column {}: source {} does not exist",
                                       drop.name_pos.line, drop.name_pos.column, drop.name));
  }
  if (!entry->counters.empty()) {
    return InvalidArgument(fmt::format("source {} is read by counter {}: drop the counter first",
                                       drop.name, entry->counters.front()->counter.name()));
  }
  const engine::Persistence::CatalogOp op{RecordName(kSourceRecord, drop.name), std::nullopt};
  if (auto status = store_.WriteCatalog({&op, 1}); !status) return tl::unexpected(status.error());
  auto next = std::make_shared<CatalogSnapshot>(*catalog);
  next->sources.erase(drop.name);
  Install(next->Rebuilt());
  return fmt::format("DROP SOURCE {}", drop.name);
}

Result<std::string> Catalog::CreateCounter(const defs::CreateCounter& create,
                                           const StartsPending& starts_pending, int64_t start_at) {
  auto catalog = Snapshot();
  auto compiled = defs::Compile(create, SchemaLookup(*catalog));
  if (!compiled) return tl::unexpected(compiled.error());
  const std::string& name = compiled->name();
  const std::string sql = compiled->create_sql();
  if (start_at != 0 && compiled->layout() != defs::Layout::kPlain) {
    // Its hidden records would lie on other partitions than its groups (docs/cluster.md).
    return InvalidArgument(fmt::format(
        "counter {}: in a cluster, derived counters are plain counts and integer sums for now "
        "(not count(DISTINCT), min, max, avg, numeric sums or several aggregates)",
        name));
  }
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
  // Plain counters already spelled like this counter's keys would be taken for its groups
  // (not looked for with start_at: see Execute).
  std::vector<std::string> clashes;
  uint64_t cursor = 0;
  while (start_at == 0) {
    cursor = keyspace_.keyspace().Scan(
        cursor, kScanStep, [&](std::string_view key) { return FamilyName(key) == name; }, &clashes);
    if (cursor == 0 || !clashes.empty()) break;
  }
  if (!clashes.empty()) {
    return InvalidArgument(fmt::format(
        "plain counters named {} or {}:... exist (e.g. '{}'): a derived counter owns its name "
        "and every key that starts with its name and ':'; delete them or choose another name",
        name, name, clashes.front().substr(0, 128)));
  }
  // Pending (its backfill gives it the rows that exist) wins over start_at: in a cluster
  // that follows PostgreSQL, every node decides it at the same place of the stream.
  const bool pending = starts_pending(compiled->source().name);
  const int64_t start = pending ? kPendingStart : start_at;
  std::vector<engine::Persistence::CatalogOp> ops{{RecordName(kCounterRecord, name), sql}};
  if (pending) ops.push_back({RecordName(kStartRecord, name), std::string(kPendingStartValue)});
  if (!pending && start_at != 0) {
    ops.push_back({RecordName(kStartRecord, name), std::to_string(start_at)});
  }
  if (auto status = store_.WriteCatalog(ops); !status) return tl::unexpected(status.error());
  auto next = std::make_shared<CatalogSnapshot>(*catalog);
  auto family = std::make_shared<Family>(std::move(*compiled));
  family->start = start;
  next->counters.emplace(family->counter.name(), family);
  Install(next->Rebuilt());
  if (!pending && start_at != 0) IndexGroupsPresent(*family);
  return fmt::format("CREATE COUNTER {}", family->counter.name());
}

void Catalog::IndexGroupsPresent(Family& family) {
  const std::string_view name = family.counter.name();
  const auto is_group = [&](std::string_view key) {
    return FamilyName(key) == name && family.IsGroupKey(key);
  };
  std::vector<std::string> keys;
  uint64_t cursor = 0;
  do {
    keys.clear();
    cursor = keyspace_.keyspace().Scan(cursor, kScanStep, is_group, &keys);
    if (keys.empty()) continue;
    std::lock_guard lock(family.mutex);
    for (const std::string& key : keys) {
      if (!family.keys.contains(Absl(key))) family.AddKey(key);
    }
    family.version.fetch_add(1, std::memory_order_relaxed);
  } while (cursor != 0);
}

Result<std::string> Catalog::DropCounter(std::string_view name) {
  auto catalog = Snapshot();
  auto counter = catalog->Counter(name);
  if (!counter) return tl::unexpected(counter.error());
  const std::shared_ptr<Family> family = std::move(*counter);
  // First durably "dropping" (a crash from here on finishes the drop at start), then the
  // groups, then the mark.
  const std::array<engine::Persistence::CatalogOp, 4> begin{{
      {RecordName(kCounterRecord, name), std::nullopt},
      {RecordName(kStartRecord, name), std::nullopt},
      {RecordName(kBackfillRecord, name), std::nullopt},
      {RecordName(kDroppingRecord, name), std::string()},
  }};
  if (auto status = store_.WriteCatalog(begin); !status) return tl::unexpected(status.error());
  auto next = std::make_shared<CatalogSnapshot>(*catalog);
  next->counters.erase(Absl(name));
  next->dropping.insert(std::string(name));
  Install(next->Rebuilt());

  keyspace_.DeleteGroups(*family);
  const engine::Persistence::CatalogOp finish{RecordName(kDroppingRecord, name), std::nullopt};
  if (auto status = store_.WriteCatalog({&finish, 1}); !status) {
    return tl::unexpected(status.error());
  }
  auto done = std::make_shared<CatalogSnapshot>(*Snapshot());
  done->dropping.erase(Absl(name));
  Install(done->Rebuilt());
  return fmt::format("DROP COUNTER {}", name);
}

// ---- Listings -------------------------------------------------------------------------

std::vector<CounterListing> Catalog::Counters() const {
  auto catalog = Snapshot();
  std::vector<CounterListing> listing;
  for (const auto& [name, family] : catalog->counters) {
    CounterListing& item = listing.emplace_back();
    item.name = name;
    item.source = family->counter.source().name;
    item.sql = family->counter.create_sql();
    for (const defs::KeyColumn& column : family->counter.key_columns()) {
      item.key_columns.push_back(fmt::format("{} {}", column.name, defs::TypeName(column.type)));
    }
    item.state = family->state();
    std::lock_guard lock(family->mutex);
    item.groups = family->keys.size();
  }
  std::ranges::sort(listing, {}, &CounterListing::name);
  return listing;
}

std::vector<SourceListing> Catalog::Sources() const {
  auto catalog = Snapshot();
  std::vector<SourceListing> listing;
  for (const auto& [name, entry] : catalog->sources) listing.push_back({name, entry->sql});
  std::ranges::sort(listing, {}, &SourceListing::name);
  return listing;
}

std::vector<bool> Catalog::ColumnsRead(std::string_view source) const {
  auto catalog = Snapshot();
  const SourceEntry* entry = catalog->FindSource(source);
  if (entry == nullptr) return {};
  std::vector<bool> read;
  for (const std::string& reader : entry->view.read_by) read.push_back(!reader.empty());
  return read;
}

std::optional<defs::SourceSchema> Catalog::SourceSchemaOf(std::string_view source) const {
  auto catalog = Snapshot();
  const SourceEntry* entry = catalog->FindSource(source);
  if (entry == nullptr) return std::nullopt;
  return entry->schema;
}

}  // namespace tally::derived
