// CatalogSnapshot: one picture of every source and derived counter, as the catalog
// (catalog.h) installed it. Readers and the apply path take the current one and work on it
// without any lock of the catalog's: DDL never changes an installed snapshot, it installs
// a new one. The families (family.h) are shared between snapshots: a snapshot's maps never
// change, but the families they point to carry their own state (start, index), guarded as
// family.h says.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/program.h"
#include "engine/derived/change_json.h"
#include "engine/derived/family.h"

namespace tally::derived {

// A source with the counters that read it.
struct SourceEntry {
  SourceEntry() = default;
  SourceEntry(const SourceEntry&) = delete;
  SourceEntry& operator=(const SourceEntry&) = delete;

  definitions::SourceSchema schema;
  std::string sql;  // the normalised CREATE SOURCE statement
  // What the change decoder needs: view.schema points at `schema`, so a SourceEntry is
  // never moved or copied once made (it lives behind a shared_ptr).
  SourceView view;
  std::vector<std::shared_ptr<Family>> counters;  // by name: the order of application
};

struct CatalogSnapshot {
  absl::flat_hash_map<std::string, std::shared_ptr<SourceEntry>> sources;
  absl::flat_hash_map<std::string, std::shared_ptr<Family>> counters;
  absl::flat_hash_set<std::string> dropping;  // counters whose groups are being deleted

  // The counter or source `name`; nullptr when there is none.
  Family* FindCounter(std::string_view name) const;
  const SourceEntry* FindSource(std::string_view name) const;
  // The counter `name`, kept alive by the caller's pointer; kNotFound when there is none.
  Result<std::shared_ptr<Family>> Counter(std::string_view name) const;
  // FindSource's view, for ChangeDecoder::Decode. Valid while this snapshot lives.
  SourceLookup Lookup() const;

  // A copy whose source entries are made anew from the counters, so that each lists the
  // counters that read it (by name) and, per column, one counter that reads it.
  std::shared_ptr<CatalogSnapshot> Rebuilt() const;
};

// kNotFound "counter <name> does not exist".
Error UnknownCounter(std::string_view name);

}  // namespace tally::derived
