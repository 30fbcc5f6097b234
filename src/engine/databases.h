// Databases: Redis's SELECT numbers (0 to tallyd --databases - 1), mapped onto the one
// keyspace of the engine.
//
// Stored form of a key of database `db`:
//   db == 0   the key's own bytes, unchanged (what tally stored before databases existed)
//   db >= 1   "\0db" <db as one byte> <the key's bytes>
// A database-0 key may therefore never start with "\0db" (IsReservedKey): the servers
// refuse such a key in database 0, for reads as well as writes, so that no key of database 0
// can name a key of another database. Keys of databases 1 and up are free, the prefix keeps
// them apart. tally's own records (derived/derived_keyspace.h: "\0id:", "\0pos:") and the
// groups of derived counters are database-0 keys.
//
// Callers: the Redis server (a session maps the keys of each command), the keyspace (its
// per-database counts), the subscription hub (a prefix follows keys of its own database
// only), INFO, metrics. Pure functions, any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tally::engine {

// How many databases the one-byte number can name; tallyd --databases is at most this.
inline constexpr uint32_t kMaxDatabases = 256;
// Redis's default, and tallyd's.
inline constexpr uint32_t kDefaultDatabases = 16;

inline constexpr std::string_view kDatabasePrefix{"\0db", 3};
// The prefix with the database byte: what every stored key of a database >= 1 starts with.
inline constexpr size_t kDatabaseKeyPrefixSize = kDatabasePrefix.size() + 1;

// True for a key that database 0 refuses: it starts with the reserved prefix.
inline bool IsReservedKey(std::string_view key) { return key.starts_with(kDatabasePrefix); }

// The database a stored key belongs to.
inline uint32_t DatabaseOf(std::string_view stored) {
  if (stored.size() < kDatabaseKeyPrefixSize || !stored.starts_with(kDatabasePrefix)) return 0;
  return static_cast<unsigned char>(stored[kDatabasePrefix.size()]);
}

// The shortest stored prefix that may follow `stored` (prefix subscriptions): a key of a
// database d >= 1 matches only prefixes that carry d's prefix, never a shorter one of
// database 0 such as "" (every key of database 0).
inline size_t ShortestPrefixFor(std::string_view stored) {
  return DatabaseOf(stored) == 0 ? 0 : kDatabaseKeyPrefixSize;
}

// Whether a prefix subscription (`prefix`, stored form) follows the stored `key`: the prefix
// starts the key and belongs to the key's own database (database 0's "" does not follow
// database 2's keys).
inline bool PrefixFollows(std::string_view prefix, std::string_view key) {
  return key.starts_with(prefix) && prefix.size() >= ShortestPrefixFor(key);
}

// A stored key split into its database and its name there.
struct DatabaseKey {
  uint32_t db = 0;
  std::string_view name;
};
DatabaseKey SplitStoredKey(std::string_view stored);

// The stored form of `name` in database `db`, written into `out` (replaced).
// REQUIRES: db < kMaxDatabases; in database 0, !IsReservedKey(name).
void StoreKeyInto(uint32_t db, std::string_view name, std::string* out);
std::string StoredKey(uint32_t db, std::string_view name);

// Why a reserved key is refused in database 0 (the HTTP API's keys are database 0's).
inline constexpr std::string_view kReservedKeyMessage =
    "keys that start with \\x00db are reserved: tally stores the keys of databases 1 and up "
    "under them";

}  // namespace tally::engine
