// Derived counter commands: COUNTER.DEFINE, DROP, LIST, PUSH, BACKFILL, GET, SCAN, TOP, RANGE,
// HOLD, RELEASE, REPAIR, REPAIRSTATE. Thin adapters over derived::DerivedCounters; replies wait
// for durability like any other.
#include <fmt/format.h>

#include <vector>

#include "core/integer.h"
#include "core/lsn.h"
#include "servers/redis/command_args.h"
#include "servers/redis/session.h"

namespace tally::redis::commands {
namespace {

constexpr size_t kMostListed = 10000;  // COUNT of COUNTER.SCAN and k of COUNTER.TOP

// The derived counters, or null after replying that this server has none.
derived::DerivedCounters* Derived(CommandContext& ctx) {
  derived::DerivedCounters* derived = ctx.server.derived();
  if (derived == nullptr) ctx.reply.Error("ERR this server keeps no derived counters");
  return derived;
}

void ReplyError(CommandContext& ctx, const Error& error) {
  ctx.reply.Error("ERR " + error.message);
}

// A count argument within 1..kMostListed, or nullopt after replying why not.
std::optional<size_t> CountArgument(CommandContext& ctx, std::string_view text,
                                    std::string_view what) {
  const std::optional<int64_t> count = IntegerArgument(ctx, text);
  if (!count) return std::nullopt;
  if (*count < 1 || *count > static_cast<int64_t>(kMostListed)) {
    ctx.reply.Error(fmt::format("ERR {} must be between 1 and {}", what, kMostListed));
    return std::nullopt;
  }
  return static_cast<size_t>(*count);
}

// One aggregate's value: an integer, a decimal or a timestamp as a bulk string
// ("1234.50", "20240501T134500Z"), NULL as a null.
void ReplyAggregate(CommandContext& ctx, const definitions::AggregateValue& value) {
  switch (value.kind) {
    case definitions::AggregateValue::Kind::kNull:
      return ctx.reply.Null();
    case definitions::AggregateValue::Kind::kInteger:
      return ctx.reply.Integer(value.integer);
    case definitions::AggregateValue::Kind::kDecimal:
    case definitions::AggregateValue::Kind::kTimestamp:
      return ctx.reply.Bulk(value.text);
  }
}

// A group's value: the integer, the one aggregate's value, or with several aggregates a
// map of their names to their values (a flat array of pairs in RESP2).
void ReplyValue(CommandContext& ctx, const derived::KeyValue& item,
                const std::vector<std::string>& names) {
  if (item.shown.empty()) return ctx.reply.Integer(item.value);
  if (names.empty()) return ReplyAggregate(ctx, item.shown.front());
  ctx.reply.MapHeader(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    ctx.reply.Bulk(names[i]);
    ReplyAggregate(ctx, item.shown[i]);
  }
}

void ReplyPairs(CommandContext& ctx, const derived::Page& page) {
  ctx.reply.ArrayHeader(page.items.size() * 2);
  for (const derived::KeyValue& item : page.items) {
    ctx.reply.Bulk(item.key);
    ReplyValue(ctx, item, page.names);
  }
}

}  // namespace

void CounterDefine(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  // In a cluster every node runs the script, at its place in the cluster's change stream.
  cluster::ChangeFront* front = ctx.server.cluster_changes();
  auto outcomes = front != nullptr ? front->Define(ctx.args[1]) : derived->Execute(ctx.args[1]);
  if (!outcomes) return ReplyError(ctx, outcomes.error());
  ctx.reply.ArrayHeader(outcomes->size());
  for (const derived::StatementOutcome& outcome : *outcomes) ctx.reply.Bulk(outcome.message);
}

void CounterDrop(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  if (cluster::ChangeFront* front = ctx.server.cluster_changes()) {
    auto name = derived->KeyOf(ctx.args[1], {});  // the same "unknown counter" error
    if (!name && name.error().code == ErrorCode::kNotFound) return ReplyError(ctx, name.error());
    auto outcomes = front->Define(fmt::format("DROP COUNTER {}", ctx.args[1]));
    if (!outcomes) return ReplyError(ctx, outcomes.error());
    return ctx.reply.SimpleString("OK");
  }
  auto outcome = derived->Drop(ctx.args[1]);
  if (!outcome) return ReplyError(ctx, outcome.error());
  ctx.reply.SimpleString("OK");
}

void CounterList(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  const std::vector<derived::CounterListing> counters = derived->Counters();
  ctx.reply.ArrayHeader(counters.size());
  for (const derived::CounterListing& counter : counters) {
    ctx.reply.MapHeader(5);
    ctx.reply.Bulk("name");
    ctx.reply.Bulk(counter.name);
    ctx.reply.Bulk("source");
    ctx.reply.Bulk(counter.source);
    ctx.reply.Bulk("sql");
    ctx.reply.Bulk(counter.sql);
    ctx.reply.Bulk("groups");
    ctx.reply.Integer(static_cast<int64_t>(counter.groups));
    // "pending" or "backfilling": its groups are not whole yet (tally verify skips it).
    ctx.reply.Bulk("state");
    ctx.reply.Bulk(derived::CounterStateName(counter.state));
  }
}

namespace {

// COUNTER.PUSH [ID id] body, and COUNTER.BACKFILL counter [ID id] body: the arguments
// from `first` on are [ID id] body.
void PushChanges(CommandContext& ctx, size_t first, std::string_view only_counter) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  std::string_view batch_id;
  size_t body = first;
  if (ctx.args.size() == first + 3 && EqualsIgnoreCase(ctx.args[first], "ID")) {
    batch_id = ctx.args[first + 1];
    body = first + 2;
    if (batch_id.empty()) return ctx.reply.Error("ERR the ID of a push must not be empty");
  } else if (ctx.args.size() != first + 1) {
    return ctx.reply.Error(kSyntaxError);
  }
  // One decoder per I/O thread: it keeps its buffers from push to push.
  thread_local derived::ChangeDecoder decoder;
  cluster::ChangeFront* front = ctx.server.cluster_changes();
  auto outcome = front != nullptr ? front->Push(ctx.args[body], batch_id, only_counter, decoder)
                                  : derived->Push(ctx.args[body], batch_id, decoder, only_counter);
  if (!outcome) return ReplyError(ctx, outcome.error());
  ctx.session.RaiseRequiredEpoch(outcome->required_epoch);
  ctx.reply.ArrayHeader(4);
  ctx.reply.Integer(static_cast<int64_t>(outcome->changes));
  ctx.reply.Integer(static_cast<int64_t>(outcome->applied));
  ctx.reply.Integer(static_cast<int64_t>(outcome->duplicates));
  ctx.reply.Integer(static_cast<int64_t>(outcome->increments));
}

}  // namespace

void CounterPush(CommandContext& ctx) { PushChanges(ctx, 1, {}); }

void CounterBackfill(CommandContext& ctx) { PushChanges(ctx, 2, ctx.args[1]); }

void CounterGet(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  auto key = derived->KeyOf(ctx.args[1], ctx.args.subspan(2));
  if (!key) return ReplyError(ctx, key.error());
  if (ctx.session.RefusedRead(*key, /*prefix=*/false)) return;
  auto page = derived->Read(ctx.args[1], {&*key, 1});
  if (!page) return ReplyError(ctx, page.error());
  ctx.session.RaiseRequiredEpoch(page->required_epoch);
  ReplyValue(ctx, page->items.front(), page->names);
}

void CounterScan(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  const std::optional<size_t> count = CountArgument(ctx, ctx.args[3], "COUNT");
  if (!count) return;
  auto prefix = derived->PrefixOf(ctx.args[1], ctx.args.subspan(4));
  if (!prefix) return ReplyError(ctx, prefix.error());
  if (ctx.session.RefusedRead(*prefix, /*prefix=*/true)) return;
  const std::string_view cursor = ctx.args[2] == "0" ? std::string_view{} : ctx.args[2];
  auto page = derived->List(ctx.args[1], *prefix, cursor, *count);
  if (!page) return ReplyError(ctx, page.error());
  ctx.session.RaiseRequiredEpoch(page->required_epoch);
  ctx.reply.ArrayHeader(2);
  ctx.reply.Bulk(page->next_cursor.empty() ? "0" : page->next_cursor);
  ReplyPairs(ctx, *page);
}

void CounterTop(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  const std::optional<size_t> k = CountArgument(ctx, ctx.args[2], "k");
  if (!k) return;
  auto prefix = derived->PrefixOf(ctx.args[1], ctx.args.subspan(3));
  if (!prefix) return ReplyError(ctx, prefix.error());
  if (ctx.session.RefusedRead(*prefix, /*prefix=*/true)) return;
  auto page = derived->Top(ctx.args[1], *prefix, *k);
  if (!page) return ReplyError(ctx, page.error());
  ctx.session.RaiseRequiredEpoch(page->required_epoch);
  ReplyPairs(ctx, *page);
}

// COUNTER.RANGE counter from to [part ...]: the group's time buckets whose start lies in
// [from, to) taken together (their sum for a count, replied as COUNTER.GET replies); the
// parts are the group's values but the time bucket. The instants
// come before the parts so that the parts may be any number (the counter decides).
void CounterRange(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  // A group's time buckets: the user must be allowed to read every key of the counter.
  auto family = derived->PrefixOf(ctx.args[1], {});
  if (!family) return ReplyError(ctx, family.error());
  if (ctx.session.RefusedRead(*family, /*prefix=*/true)) return;
  auto range = derived->Range(ctx.args[1], ctx.args.subspan(4), ctx.args[2], ctx.args[3]);
  if (!range) return ReplyError(ctx, range.error());
  ctx.session.RaiseRequiredEpoch(range->required_epoch);
  ReplyValue(ctx, range->total, range->names);
}

// COUNTER.HOLD <lsn> sets a verification hold; COUNTER.HOLD alone reports it as
// [held, position, reached].
void CounterHold(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  // In a cluster the hold is the change stream's: set and released through it, reported as
  // this node sees it (cluster/change_front.h).
  cluster::ChangeFront* front = ctx.server.cluster_changes();
  if (ctx.args.size() == 1) {
    const derived::HoldReport report =
        front != nullptr ? front->ReportHold() : derived->ReportHold();
    ctx.reply.ArrayHeader(4);
    ctx.reply.Integer(report.hold.held ? 1 : 0);
    ctx.reply.Bulk(FormatLsn(static_cast<Lsn>(report.hold.position)));
    ctx.reply.Integer(report.hold.reached ? 1 : 0);
    ctx.reply.Bulk(FormatLsn(static_cast<Lsn>(report.applied)));
    return;
  }
  const bool replace = ctx.args.size() == 3 && EqualsIgnoreCase(ctx.args[2], "REPLACE");
  if (ctx.args.size() != 2 && !replace) return ctx.reply.Error(kSyntaxError);
  auto lsn = ParseLsn(ctx.args[1]);
  if (!lsn) return ReplyError(ctx, lsn.error());
  if (*lsn == 0 || *lsn > static_cast<uint64_t>(INT64_MAX)) {
    return ctx.reply.Error("ERR the hold position must be an LSN above 0/0");
  }
  const auto position = static_cast<int64_t>(*lsn);
  auto status =
      front != nullptr ? front->Hold(position, replace) : derived->Hold(position, replace);
  if (!status) return ReplyError(ctx, status.error());
  ctx.reply.SimpleString("OK");
}

void CounterRelease(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  if (cluster::ChangeFront* front = ctx.server.cluster_changes()) {
    if (auto status = front->Release(); !status) return ReplyError(ctx, status.error());
  } else {
    derived->Release();
  }
  ctx.reply.SimpleString("OK");
}

// COUNTER.REPAIR counter key value [key value ...]: sets groups (0 deletes) in one commit.
void CounterRepair(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  if (ctx.args.size() % 2 != 0) return ctx.reply.Error(kSyntaxError);
  std::vector<derived::KeyValue> values;
  for (size_t i = 2; i + 1 < ctx.args.size(); i += 2) {
    const std::optional<int64_t> value = IntegerArgument(ctx, ctx.args[i + 1]);
    if (!value) return;
    values.push_back({std::string(ctx.args[i]), *value});
  }
  // In a cluster each group is set by its partition's owner, through the change stream.
  if (cluster::ChangeFront* front = ctx.server.cluster_changes()) {
    if (auto status = front->Repair(ctx.args[1], values); !status) {
      return ReplyError(ctx, status.error());
    }
  } else {
    auto epoch = derived->Repair(ctx.args[1], values);
    if (!epoch) return ReplyError(ctx, epoch.error());
    ctx.session.RaiseRequiredEpoch(*epoch);
  }
  ctx.reply.Integer(static_cast<int64_t>(values.size()));
}

// COUNTER.REPAIRSTATE counter key value records [tag number ...] [key value records ...]:
// sets whole groups of a counter that keeps hidden records, in one commit. Each group is its
// key, what the key holds (a composite group's rows, a distinct count's number of values),
// how many records follow, and each record as its tag (definitions::RecordTag: "0s", "1n",
// "2v" and the value's bytes) and its number; the group's other records are deleted.
void CounterRepairState(CommandContext& ctx) {
  derived::DerivedCounters* derived = Derived(ctx);
  if (derived == nullptr) return;
  std::vector<derived::GroupStateValue> states;
  for (size_t i = 2; i < ctx.args.size();) {
    if (i + 3 > ctx.args.size()) return ctx.reply.Error(kSyntaxError);
    derived::GroupStateValue& state = states.emplace_back();
    state.key = ctx.args[i];
    const std::optional<int64_t> value = IntegerArgument(ctx, ctx.args[i + 1]);
    if (!value) return;
    const std::optional<int64_t> records = IntegerArgument(ctx, ctx.args[i + 2]);
    if (!records) return;
    i += 3;
    if (*records < 0 || static_cast<uint64_t>(*records) > (ctx.args.size() - i) / 2) {
      return ctx.reply.Error(
          fmt::format("ERR group {} announces {} records; {} arguments follow it",
                      state.key.substr(0, 128), *records, ctx.args.size() - i));
    }
    state.value = *value;
    for (int64_t r = 0; r < *records; ++r, i += 2) {
      const std::optional<int64_t> number = IntegerArgument(ctx, ctx.args[i + 1]);
      if (!number) return;
      state.records.push_back({std::string(ctx.args[i]), *number});
    }
  }
  auto epoch = derived->RepairStates(ctx.args[1], states);
  if (!epoch) return ReplyError(ctx, epoch.error());
  ctx.session.RaiseRequiredEpoch(*epoch);
  ctx.reply.Integer(static_cast<int64_t>(states.size()));
}

}  // namespace tally::redis::commands
