#include "engine/derived/family_reads.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <queue>
#include <vector>

#include "core/calendar.h"
#include "core/integer.h"
#include "core/timestamp.h"
#include "engine/definitions/time_util.h"
#include "engine/definitions/value.h"
#include "engine/derived/key_part.h"

namespace tally::derived {

namespace defs = tally::definitions;

namespace {

// Cached top-K answers per counter (distinct prefixes and k); past this the cache restarts.
constexpr size_t kTopCacheEntries = 4096;

// Key column `column` of `counter` as a read spells it (key_part.h); a text value views
// `text` or *storage.
Result<defs::Value> ParsePart(const defs::CompiledCounter& counter, size_t column,
                              std::string_view text, std::string* storage) {
  const defs::KeyColumn& key = counter.key_columns()[column];
  auto value = ParseKeyPart(key.type, text, storage);
  if (!value) {
    return InvalidArgument(fmt::format("counter {}, key part {} ({} {}): {}", counter.name(),
                                       column + 1, key.name, defs::TypeName(key.type),
                                       value.error().message));
  }
  return *value;
}

// The first parts.size() key columns; text values view `parts` or *texts (resized to
// parts.size()).
Result<std::vector<defs::Value>> ParseParts(const defs::CompiledCounter& counter,
                                            std::span<const std::string_view> parts,
                                            std::vector<std::string>* texts) {
  texts->resize(parts.size());
  std::vector<defs::Value> values;
  values.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    auto value = ParsePart(counter, i, parts[i], &(*texts)[i]);
    if (!value) return tl::unexpected(value.error());
    values.push_back(*value);
  }
  return values;
}

// An instant of a range read (core/timestamp.h), its error naming the parameter.
Result<int64_t> ParseInstant(std::string_view name, std::string_view text) {
  auto micros = tally::ParseInstant(text);
  if (!micros) return InvalidArgument(fmt::format("{} {}", name, micros.error().message));
  return *micros;
}

// True when FormatTimestamp spells `micros` in the fixed width "YYYYMMDDTHHMMSSZ" (years
// 0-9999, whole seconds): among such spellings byte order is time order.
bool FixedWidthTimestamp(int64_t micros) {
  constexpr int64_t kYear0 = MicrosFromCivil(0, 1, 1);
  constexpr int64_t kYear10000 = MicrosFromCivil(10000, 1, 1);
  return micros >= kYear0 && micros < kYear10000 && micros % kMicrosPerSecond == 0;
}

}  // namespace

Result<std::string> FamilyReads::KeyOf(const Family& family,
                                       std::span<const std::string_view> parts) {
  const defs::CompiledCounter& counter = family.counter;
  const size_t columns = counter.key_columns().size();
  if (parts.size() != columns) {
    return InvalidArgument(fmt::format("counter {} has {} key parts; {} given", counter.name(),
                                       columns, parts.size()));
  }
  std::vector<std::string> texts;
  auto values = ParseParts(counter, parts, &texts);
  if (!values) return tl::unexpected(values.error());
  return defs::EncodeKey(counter.name(), *values);
}

Result<std::string> FamilyReads::PrefixOf(const Family& family,
                                          std::span<const std::string_view> parts) {
  const defs::CompiledCounter& counter = family.counter;
  const size_t columns = counter.key_columns().size();
  if (columns == 0 && !parts.empty()) {
    return InvalidArgument(fmt::format(
        "counter {} has no key parts (no GROUP BY): its one group is read without any ({} given)",
        counter.name(), parts.size()));
  }
  if (columns > 0 && parts.size() >= columns) {
    return InvalidArgument(
        fmt::format("counter {} has {} key parts: a prefix names fewer ({} given)", counter.name(),
                    columns, parts.size()));
  }
  std::vector<std::string> texts;
  auto values = ParseParts(counter, parts, &texts);
  if (!values) return tl::unexpected(values.error());
  std::string prefix = defs::EncodeKey(counter.name(), *values);
  if (columns > 0) prefix += ':';
  return prefix;
}

std::vector<std::string> FamilyReads::Names(const Family& family) {
  std::vector<std::string> names;
  const std::vector<defs::AggregateColumn>& aggregates = family.counter.aggregates();
  if (aggregates.size() > 1) {
    for (const defs::AggregateColumn& column : aggregates) names.push_back(column.name);
  }
  return names;
}

Result<Page> FamilyReads::List(Family& family, std::string_view prefix, std::string_view cursor,
                               size_t limit) {
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
  page.names = Names(family);
  for (KeyValue& group : keyspace_.ReadGroups(family, keys, &page.required_epoch)) {
    if (group.value != 0) page.items.push_back(std::move(group));
  }
  return page;
}

Result<Page> FamilyReads::Top(Family& family, std::string_view prefix, size_t k) {
  const int64_t now = keyspace_.NowMillis();
  const std::string cache_key = fmt::format("{}\n{}", prefix, k);
  const uint64_t version = family.version.load(std::memory_order_acquire);
  {
    std::lock_guard lock(family.mutex);
    const auto cached = family.top_cache.find(cache_key);
    if (cached != family.top_cache.end() &&
        (cached->second.version == version ||
         now - cached->second.computed_ms < top_k_max_staleness_ms_)) {
      return cached->second.page;
    }
  }
  // A min-heap of the k best seen so far: the worst on top.
  // By the value shown (its first aggregate) when it is not the key's integer.
  auto better = [](const KeyValue& a, const KeyValue& b) {
    if (!a.shown.empty() && !b.shown.empty()) {
      const int order = defs::CompareValues(a.shown.front(), b.shown.front());
      return order != 0 ? order > 0 : a.key < b.key;
    }
    return a.value != b.value ? a.value > b.value : a.key < b.key;
  };
  std::priority_queue<KeyValue, std::vector<KeyValue>, decltype(better)> best(better);
  Page page;
  std::string cursor;
  while (true) {
    auto chunk = List(family, prefix, cursor, kChunk);
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
  page.names = Names(family);
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

Result<RangeSum> FamilyReads::Range(Family& family, std::span<const std::string_view> parts,
                                    std::string_view from_text, std::string_view to_text) {
  const defs::CompiledCounter& compiled = family.counter;
  const std::string& counter = compiled.name();
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
  std::vector<std::string> texts(parts.size());  // of text values
  for (size_t i = 0, part = 0; i < columns.size(); ++i) {
    if (i == bucket->column) continue;
    auto value = ParsePart(compiled, i, parts[part], &texts[part]);
    ++part;
    if (!value) return tl::unexpected(value.error());
    values[i] = *value;
  }
  auto from = ParseInstant("from", from_text);
  if (!from) return tl::unexpected(from.error());
  auto to = ParseInstant("to", to_text);
  if (!to) return tl::unexpected(to.error());
  if (*from > *to) {
    return InvalidArgument(fmt::format("the range is backwards: from {} is after to {}",
                                       FormatTimestamp(*from), FormatTimestamp(*to)));
  }

  // The group's buckets lie under the prefix of the key columns before the bucket; with
  // fixed-width instants the scan starts at `from` and stops at `to` in byte order.
  const std::string prefix =
      defs::EncodeKey(compiled.name(), std::span(values.data(), bucket->column)) + ":";
  const std::string low = FixedWidthTimestamp(*from) ? prefix + FormatTimestamp(*from) : prefix;
  const std::string stop = FixedWidthTimestamp(*to) ? prefix + FormatTimestamp(*to) : "";
  const int64_t now = keyspace_.NowMillis() * 1000;
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
  out.names = Names(family);
  auto overflow = [&] {
    return MakeError(ErrorCode::kOverflow,
                     fmt::format("the sum of counter {} from {} to {} is out of the int64 range",
                                 counter, FormatTimestamp(*from), FormatTimestamp(*to)));
  };
  if (family.states == nullptr) {
    for (const int64_t value : keyspace_.Get(keys, &out.required_epoch)) {
      if (value == 0) continue;
      const std::optional<int64_t> sum = CheckedAdd(out.total.value, value);
      if (!sum) return overflow();
      out.total.value = *sum;
      ++out.buckets;
    }
    if (!defs::ShowsInteger(compiled)) out.total.shown = defs::ShowPlain(compiled, out.total.value);
    return out;
  }
  GroupCombination combined(compiled);
  bool fits = true;
  keyspace_.VisitGroups(family, keys, &out.required_epoch,
                        [&](size_t i, int64_t value, const GroupStates* states) {
                          if (value == 0) return;  // a group at 0 is no group (a read's rule)
                          ++out.buckets;
                          fits = combined.Add(*states, keys[i], value) && fits;
                        });
  if (!fits) return overflow();
  out.total.shown = combined.Show();
  return out;
}

}  // namespace tally::derived
