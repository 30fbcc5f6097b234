#include "engine/derived/catalog_snapshot.h"

#include <fmt/format.h>

#include <algorithm>

namespace tally::derived {

Error UnknownCounter(std::string_view name) {
  return Error{ErrorCode::kNotFound, fmt::format("counter {} does not exist", name)};
}

Family* CatalogSnapshot::FindCounter(std::string_view name) const {
  const auto it = counters.find(Absl(name));
  return it == counters.end() ? nullptr : it->second.get();
}

const SourceEntry* CatalogSnapshot::FindSource(std::string_view name) const {
  const auto it = sources.find(Absl(name));
  return it == sources.end() ? nullptr : it->second.get();
}

Result<std::shared_ptr<Family>> CatalogSnapshot::Counter(std::string_view name) const {
  const auto it = counters.find(Absl(name));
  if (it == counters.end()) return tl::unexpected(UnknownCounter(name));
  return it->second;
}

SourceLookup CatalogSnapshot::Lookup() const {
  return [this](std::string_view name) -> const SourceView* {
    const SourceEntry* source = FindSource(name);
    return source == nullptr ? nullptr : &source->view;
  };
}

std::shared_ptr<CatalogSnapshot> CatalogSnapshot::Rebuilt() const {
  auto next = std::make_shared<CatalogSnapshot>();
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

}  // namespace tally::derived
