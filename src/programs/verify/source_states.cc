#include "programs/verify/source_states.h"

#include <fmt/core.h>
#include <libpq-fe.h>

#include <string_view>
#include <unordered_map>

#include "engine/definitions/lexer.h"
#include "engine/definitions/numeric.h"
#include "sources/postgres/pg_types.h"

namespace tally::verify {
namespace {

namespace defs = tally::definitions;
namespace pg = tally::postgres;

// " WHERE <filter> AND <also>", either part left out when empty.
std::string Where(const defs::CompiledCounter& counter, const std::string& also) {
  std::string out;
  if (!counter.filter_sql().empty()) out = "(" + counter.filter_sql() + ")";
  if (!also.empty()) out += (out.empty() ? "" : " AND ") + also;
  return out.empty() ? out : " WHERE " + out;
}

// "1, 2, ..., n": GROUP BY the first n select items.
std::string Positions(size_t n) {
  std::string out;
  for (size_t i = 1; i <= n; ++i) out += fmt::format("{}{}", i > 1 ? ", " : "", i);
  return out;
}

// The argument of aggregate `column` in field `field`, as the formula reads a row's: a
// numeric at the aggregate's scale (exactly), any other type as ParsePgText reads it.
Result<defs::Value> ArgumentOf(const defs::AggregateColumn& column, const pg::PgResult& row,
                               int field) {
  const defs::SourceSchema::Column as{{}, column.type, 0, column.scale};
  return pg::ParsePgCell(PQftype(row.get(), field), as, Cell(row, field));
}

}  // namespace

std::vector<RecordQuery> RecordQueries(const defs::CompiledCounter& counter) {
  std::string keys;
  for (const defs::KeyColumn& key : counter.key_columns()) keys += key.sql + ", ";
  const size_t key_count = counter.key_columns().size();
  const std::string from = " FROM " + defs::QuoteIdentifier(counter.source().name);
  const std::vector<defs::AggregateColumn>& aggregates = counter.aggregates();
  std::vector<RecordQuery> out;
  if (counter.layout() == defs::Layout::kComposite) {
    RecordQuery& query = out.emplace_back();
    query.sql = "SELECT " + keys + "count(*)";
    for (uint32_t i = 0; i < aggregates.size(); ++i) {
      const std::string& arg = aggregates[i].argument_sql;
      switch (aggregates[i].kind) {
        case defs::Aggregate::kSum:
        case defs::Aggregate::kAvg:
          query.sql += fmt::format(", sum({})", arg);
          query.columns.emplace_back(i, defs::RecordKind::kSum);
          [[fallthrough]];
        case defs::Aggregate::kCount:
          query.sql += fmt::format(", count({})", arg);
          query.columns.emplace_back(i, defs::RecordKind::kCount);
          break;
        default:
          break;
      }
    }
    query.sql += from + Where(counter, "");
    if (key_count > 0) query.sql += " GROUP BY " + Positions(key_count);
  }
  for (uint32_t i = 0; i < aggregates.size(); ++i) {
    const defs::Aggregate kind = aggregates[i].kind;
    if (kind != defs::Aggregate::kCountDistinct && kind != defs::Aggregate::kMin &&
        kind != defs::Aggregate::kMax) {
      continue;
    }
    const std::string& arg = aggregates[i].argument_sql;
    RecordQuery& query = out.emplace_back();
    query.values_of = i;
    query.sql = fmt::format("SELECT {}{}, count(*){}{} GROUP BY {}", keys, arg, from,
                            Where(counter, "(" + arg + ") IS NOT NULL"), Positions(key_count + 1));
  }
  return out;
}

Result<std::vector<GroupState>> SourceStates(Source& source, const Counter& counter,
                                             std::span<const std::string> keys) {
  const defs::CompiledCounter& compiled = *counter.compiled;
  std::vector<GroupState> states(keys.size());
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) {
    states[i].key = keys[i];
    index.emplace(keys[i], i);
  }
  const int key_count = static_cast<int>(compiled.key_columns().size());
  for (const RecordQuery& query : RecordQueries(compiled)) {
    const bool values = query.values_of >= 0;
    const auto visit = [&](const pg::PgResult& row) -> Status {
      auto key = RowKey(counter, row);
      if (!key) return tl::unexpected(key.error());
      const auto it = index.find(*key);
      if (it == index.end()) return OkStatus();  // a group that does not differ
      GroupState& state = states[it->second];
      const auto refused = [&](int field, const Error& error) {
        return InvalidArgument(fmt::format("counter {}: group {}: column {} ({}): {}", counter.name,
                                           state.key, field + 1, PQfname(row.get(), field),
                                           error.message));
      };
      // A count, or a sum in units of its aggregate's scale.
      const auto number = [&](int field, int scale) {
        return defs::ParseDecimal(Cell(row, field), scale);
      };
      std::string tag;
      if (values) {
        const uint32_t i = static_cast<uint32_t>(query.values_of);
        auto argument = ArgumentOf(compiled.aggregates()[i], row, key_count);
        if (!argument) return refused(key_count, argument.error());
        auto bytes = defs::ValueBytes(compiled.aggregates()[i], *argument);
        if (!bytes) return refused(key_count, bytes.error());
        auto rows = number(key_count + 1, 0);
        if (!rows) return refused(key_count + 1, rows.error());
        defs::AppendRecordTag(i, defs::RecordKind::kValue, *bytes, &tag);
        state.records.emplace_back(std::move(tag), *rows);
        if (compiled.layout() == defs::Layout::kDistinct) ++state.value;
        return OkStatus();
      }
      auto rows = number(key_count, 0);
      if (!rows) return refused(key_count, rows.error());
      state.value = *rows;
      for (size_t c = 0; c < query.columns.size(); ++c) {
        const int field = key_count + 1 + static_cast<int>(c);
        if (PQgetisnull(row.get(), 0, field)) continue;  // a sum without rows: no record
        const auto [i, kind] = query.columns[c];
        auto record =
            number(field, kind == defs::RecordKind::kSum ? compiled.aggregates()[i].scale : 0);
        if (!record) return refused(field, record.error());
        if (*record == 0) continue;  // a record is never 0
        tag.clear();
        defs::AppendRecordTag(i, kind, {}, &tag);
        state.records.emplace_back(tag, *record);
      }
      return OkStatus();
    };
    const int columns = key_count + (values ? 2 : 1 + static_cast<int>(query.columns.size()));
    if (auto read = source.ForEachRow(query.sql, "counter " + counter.name + ": " + query.sql,
                                      columns, visit);
        !read) {
      return tl::unexpected(read.error());
    }
  }
  return states;
}

}  // namespace tally::verify
