#include "programs/verify/tally_side.h"

#include <fmt/core.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>

#include "engine/definitions/parser.h"

namespace tally::verify {
namespace {

namespace defs = tally::definitions;

// The schemas of tallyd's sources (SHOW SOURCES), to compile its counters' definitions.
Result<std::vector<defs::SourceSchema>> ListSources(RespClient& tally) {
  auto reply = tally.Check({"COUNTER.DEFINE", "SHOW SOURCES"});
  if (!reply) return tl::unexpected(reply.error());
  if (reply->kind != Reply::Kind::kArray) {
    return InvalidArgument("tallyd: SHOW SOURCES answered " + reply->Describe());
  }
  std::vector<defs::SourceSchema> sources;
  for (const Reply& item : reply->items) {
    auto statement = defs::ParseStatement(item.text);
    const auto* create = statement ? std::get_if<defs::CreateSource>(&*statement) : nullptr;
    auto schema = create != nullptr ? defs::CompileSource(*create) : Result<defs::SourceSchema>();
    if (create == nullptr || !schema) {
      return InvalidArgument(
          fmt::format("tallyd: SHOW SOURCES: unexpected source '{}'", item.text));
    }
    sources.push_back(std::move(*schema));
  }
  return sources;
}

// One aggregate's value in a reply: an integer, a bulk string (ReadAggregate) or nil.
Result<defs::AggregateValue> AggregateOf(const defs::AggregateColumn& column, const Reply& reply) {
  switch (reply.kind) {
    case Reply::Kind::kNil:
      return defs::AggregateValue::Null();
    case Reply::Kind::kInteger:
      return ReadAggregate(column, std::to_string(reply.integer));
    case Reply::Kind::kBulk:
      return ReadAggregate(column, reply.text);
    default:
      break;
  }
  return InvalidArgument("a value " + reply.Describe());
}

// A group's value as COUNTER.SCAN shows it: one aggregate's value, or with several the
// names and values in turn (a map, flattened).
Result<defs::GroupValue> ShownValue(const defs::CompiledCounter& counter, const Reply& reply) {
  const std::vector<defs::AggregateColumn>& columns = counter.aggregates();
  if (columns.size() == 1) {
    auto value = AggregateOf(columns.front(), reply);
    if (!value) return tl::unexpected(value.error());
    return defs::GroupValue{std::move(*value)};
  }
  if (reply.kind != Reply::Kind::kArray || reply.items.size() != 2 * columns.size()) {
    return InvalidArgument(
        fmt::format("a value {}, not the {} aggregates by name", reply.Describe(), columns.size()));
  }
  defs::GroupValue out;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (reply.items[2 * i].text != columns[i].name) {
      return InvalidArgument(fmt::format("aggregate {} is named {}, not {}", i + 1,
                                         reply.items[2 * i].Describe(), columns[i].name));
    }
    auto value = AggregateOf(columns[i], reply.items[2 * i + 1]);
    if (!value) return tl::unexpected(value.error());
    out.push_back(std::move(*value));
  }
  return out;
}

}  // namespace

Result<std::vector<Counter>> ListCounters(RespClient& tally) {
  auto sources = ListSources(tally);
  if (!sources) return tl::unexpected(sources.error());
  const defs::Catalog catalog = [&](std::string_view name) -> const defs::SourceSchema* {
    const auto it = std::ranges::find(*sources, name, &defs::SourceSchema::name);
    return it == sources->end() ? nullptr : &*it;
  };
  auto reply = tally.Check({"COUNTER.LIST"});
  if (!reply) return tl::unexpected(reply.error());
  if (reply->kind != Reply::Kind::kArray) {
    return InvalidArgument("tallyd: COUNTER.LIST answered " + reply->Describe());
  }
  std::vector<Counter> counters;
  for (const Reply& item : reply->items) {
    if (item.kind != Reply::Kind::kArray || item.items.size() % 2 != 0) {
      return InvalidArgument("tallyd: COUNTER.LIST: unexpected entry " + item.Describe());
    }
    Counter c;
    std::string sql;
    for (size_t i = 0; i + 1 < item.items.size(); i += 2) {
      const std::string& field = item.items[i].text;
      const Reply& value = item.items[i + 1];
      if (field == "name") c.name = value.text;
      if (field == "source") c.source = value.text;
      if (field == "sql") sql = value.text;
      if (field == "groups") c.groups = value.AsInteger().value_or(0);
      if (field == "state") c.state = value.text;
    }
    // The normalised CREATE COUNTER, compiled as tallyd compiled it: its sql() is the SELECT
    // to run on the source (without the WITH options).
    auto compiled = defs::CompileSql(sql, catalog);
    if (!compiled || compiled->name() != c.name) {
      return InvalidArgument(fmt::format("tallyd: counter {}: unexpected SQL '{}'{}", c.name, sql,
                                         compiled ? "" : ": " + compiled.error().message));
    }
    c.select = compiled->sql();
    c.compiled = std::make_shared<const defs::CompiledCounter>(std::move(*compiled));
    counters.push_back(std::move(c));
  }
  return counters;
}

Result<Groups> TallyGroups(RespClient& tally, const Counter& counter, Progress& progress) {
  Groups groups;
  std::string cursor = "0";
  for (uint64_t calls = 0;; ++calls) {
    auto reply = tally.Check({"COUNTER.SCAN", counter.name, cursor, "10000"});
    if (!reply) return tl::unexpected(reply.error());
    if (reply->kind != Reply::Kind::kArray || reply->items.size() != 2 ||
        reply->items[1].kind != Reply::Kind::kArray || reply->items[1].items.size() % 2 != 0) {
      return InvalidArgument("tallyd: COUNTER.SCAN " + counter.name + " answered " +
                             reply->Describe());
    }
    const auto& flat = reply->items[1].items;
    for (size_t i = 0; i + 1 < flat.size(); i += 2) {
      auto value = ShownValue(*counter.compiled, flat[i + 1]);
      if (!value) {
        return InvalidArgument("tallyd: COUNTER.SCAN " + counter.name + ": group " +
                               flat[i].text.substr(0, 128) + ": " + value.error().message);
      }
      groups[flat[i].text] = std::move(*value);
    }
    progress.TallyGroups(groups.size());
    cursor = reply->items[0].text;
    if (reply->items[0].kind == Reply::Kind::kInteger) {
      cursor = std::to_string(reply->items[0].integer);
    }
    if (cursor == "0") break;
    if (calls > 100'000'000) {
      return InvalidArgument("tallyd: COUNTER.SCAN " + counter.name + " does not end");
    }
  }
  return groups;
}

Result<int64_t> ServerMicros(RespClient& tally) {
  auto reply = tally.Check({"TIME"});
  if (!reply) return tl::unexpected(reply.error());
  if (reply->kind != Reply::Kind::kArray || reply->items.size() != 2 ||
      !reply->items[0].AsInteger() || !reply->items[1].AsInteger()) {
    return InvalidArgument("tallyd: TIME answered " + reply->Describe());
  }
  return *reply->items[0].AsInteger() * 1'000'000 + *reply->items[1].AsInteger();
}

}  // namespace tally::verify
