#include "engine/databases.h"

#include <cassert>

namespace tally::engine {

DatabaseKey SplitStoredKey(std::string_view stored) {
  const uint32_t db = DatabaseOf(stored);
  if (db == 0) return {0, stored};
  return {db, stored.substr(kDatabaseKeyPrefixSize)};
}

void StoreKeyInto(uint32_t db, std::string_view name, std::string* out) {
  assert(db < kMaxDatabases);
  assert(db != 0 || !IsReservedKey(name));
  out->clear();
  if (db != 0) {
    out->append(kDatabasePrefix);
    out->push_back(static_cast<char>(db));
  }
  out->append(name);
}

std::string StoredKey(uint32_t db, std::string_view name) {
  std::string out;
  StoreKeyInto(db, name, &out);
  return out;
}

}  // namespace tally::engine
