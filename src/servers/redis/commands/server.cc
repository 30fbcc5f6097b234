// Server commands: COMMAND, INFO, CONFIG GET, TIME.
#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <type_traits>
#include <variant>

#include "core/escape.h"
#include "core/glob.h"
#include "core/process_stats.h"
#include "core/version.h"
#include "servers/redis/command_args.h"
#include "servers/redis/session.h"

namespace tally::redis::commands {
namespace {

constexpr size_t kInfoHotKeys = 10;  // the hot keys INFO lists

void CommandInfo(CommandContext& ctx, const CommandSpec& spec) {
  ctx.reply.ArrayHeader(10);
  ctx.reply.Bulk(spec.name);
  ctx.reply.Integer(spec.arity);
  const auto flags = FlagNames(spec);
  ctx.reply.SetHeader(flags.size());
  for (const auto flag : flags) ctx.reply.SimpleString(flag);
  ctx.reply.Integer(spec.first_key);
  ctx.reply.Integer(spec.last_key);
  ctx.reply.Integer(spec.key_step);
  ctx.reply.SetHeader(0);    // ACL categories
  ctx.reply.SetHeader(0);    // tips
  ctx.reply.ArrayHeader(0);  // key specifications
  ctx.reply.ArrayHeader(0);  // subcommands
}

// COMMAND GETKEYS command [arg ...]: the keys of that request (Redis's texts for the errors);
// for a command of movable keys, the argument a cluster client routes it by (redis-py asks).
void CommandGetKeys(CommandContext& ctx) {
  const std::span<const std::string_view> request = ctx.args.subspan(2);
  const CommandSpec* spec = FindCommand(request[0]);
  if (spec == nullptr) return ctx.reply.Error("ERR Invalid command specified");
  const int argc = static_cast<int>(request.size());
  if ((spec->arity > 0 && argc != spec->arity) || (spec->arity < 0 && argc < -spec->arity)) {
    return ctx.reply.Error("ERR Invalid number of arguments specified for command");
  }
  std::vector<size_t> positions;
  if (spec->flags & kMovableKeys) {
    // A push by its body (pushes spread over the nodes), the others by their counter.
    const bool push =
        spec->handler == commands::CounterPush || spec->handler == commands::CounterBackfill;
    if (request.size() > 1) positions.push_back(push ? request.size() - 1 : 1);
  } else {
    KeyPositions(*spec, request.size(), &positions);
  }
  if (positions.empty()) return ctx.reply.Error("ERR The command has no key arguments");
  ctx.reply.ArrayHeader(positions.size());
  for (const size_t position : positions) ctx.reply.Bulk(request[position]);
}

void CommandDocs(CommandContext& ctx, const CommandSpec& spec) {
  ctx.reply.Bulk(spec.name);
  ctx.reply.MapHeader(3);
  ctx.reply.Bulk("summary");
  ctx.reply.Bulk(spec.summary);
  ctx.reply.Bulk("since");
  ctx.reply.Bulk(spec.since);
  ctx.reply.Bulk("group");
  ctx.reply.Bulk(spec.group);
}

std::string Human(int64_t bytes) {
  if (bytes >= (1LL << 30)) return fmt::format("{:.2f}G", static_cast<double>(bytes) / (1LL << 30));
  if (bytes >= (1LL << 20)) return fmt::format("{:.2f}M", static_cast<double>(bytes) / (1LL << 20));
  if (bytes >= (1LL << 10)) return fmt::format("{:.2f}K", static_cast<double>(bytes) / (1LL << 10));
  return fmt::format("{}B", bytes);
}

// Each INFO section appends "# Name\r\n" and "field:value\r\n" lines.
void ServerSection(CommandContext& ctx, std::string& out) {
  utsname uts{};
  uname(&uts);
  const int64_t uptime =
      (ctx.server.engine().keyspace().clock()->NowMillis() - ctx.server.start_ms()) / 1000;
  fmt::format_to(std::back_inserter(out),
                 "# Server\r\nredis_version:7.0.0\r\ntally_version:{}\r\nredis_mode:{}\r\n"
                 "os:{} {} {}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\n"
                 "uptime_in_seconds:{}\r\nuptime_in_days:{}\r\nio_threads_active:{}\r\n"
                 "config_file:{}\r\n",
                 Version(), ctx.server.cluster() != nullptr ? "cluster" : "standalone", uts.sysname,
                 uts.release, uts.machine, getpid(), ctx.server.bound_port(), uptime,
                 uptime / 86400, ctx.server.worker_count(), ctx.server.options().config_file);
}

void ClientsSection(CommandContext& ctx, std::string& out) {
  fmt::format_to(std::back_inserter(out),
                 "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:0\r\n",
                 ctx.server.clients().size(), ctx.server.options().maxclients);
}

void MemorySection(CommandContext& ctx, std::string& out) {
  const auto counters = static_cast<int64_t>(ctx.server.engine().keyspace().memory_bytes());
  const int64_t rss = ResidentBytes();
  fmt::format_to(std::back_inserter(out),
                 "# Memory\r\nused_memory:{}\r\nused_memory_human:{}\r\nused_memory_rss:{}\r\n"
                 "used_memory_rss_human:{}\r\ncounters_memory:{}\r\ncounters_memory_human:{}\r\n"
                 "maxmemory:0\r\n",
                 rss, Human(rss), rss, Human(rss), counters, Human(counters));
}

void PersistenceSection(CommandContext& ctx, std::string& out) {
  const engine::Engine& engine = ctx.server.engine();
  const engine::Committer& committer = ctx.server.engine().committer();
  const engine::CommitStats stats = committer.stats();
  const engine::PersistenceStats store = engine.persistence_stats();
  fmt::format_to(
      std::back_inserter(out),
      "# Persistence\r\nloading:0\r\nstore:rocksdb+commit-log\r\ndata_dir:{}\r\ndurability:{}\r\n"
      "counters_loaded_at_start:{}\r\ncommits:{}\r\ncommitted_puts:{}\r\ncommitted_deletes:{}\r\n"
      "commit_failures:{}\r\ncommit_fsyncs:{}\r\nlast_commit_usec:{}\r\navg_commit_usec:{}\r\n"
      "durable_epoch:{}\r\n"
      "open_epoch:{}\r\nstore_healthy:{}\r\ncheckpoints:{}\r\ncheckpoint_failures:{}\r\n"
      "last_checkpoint_msec:{}\r\ncheckpoint_backlog_counters:{}\r\nlog_bytes_since_checkpoint:{}"
      "\r\n"
      "store_table_bytes:{}\r\naof_enabled:0\r\nrdb_changes_since_last_save:0\r\n",
      ctx.server.options().data_dir,
      committer.durability() == engine::Durability::kSync ? "sync" : "async",
      engine.loaded_counters(), stats.commits, stats.puts, stats.deletes, stats.failures,
      stats.syncs, stats.last_commit_micros,
      stats.commits == 0 ? 0 : stats.total_commit_micros / stats.commits, committer.durable_epoch(),
      ctx.server.engine().keyspace().open_epoch(), stats.healthy ? 1 : 0, stats.checkpoints,
      stats.checkpoint_failures, stats.last_checkpoint_ms,
      ctx.server.engine().keyspace().checkpoint_backlog(), store.log_bytes, store.disk_bytes);
}

void StatsSection(CommandContext& ctx, std::string& out) {
  ServerCore& s = ctx.server;
  const engine::CommitStats stats = s.engine().committer().stats();
  fmt::format_to(
      std::back_inserter(out),
      "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n"
      "instantaneous_ops_per_sec:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\n"
      "rejected_connections:{}\r\nexpired_keys:{}\r\nincrements_buffered:{}\r\n"
      "increment_folds:{}\r\nclient_output_buffer_limit_disconnections:{}\r\n"
      "protocol_errors:{}\r\n",
      s.connections_received.load(), s.Total(&WorkerStats::commands), s.ops_per_second.load(),
      s.Total(&WorkerStats::net_input_bytes), s.Total(&WorkerStats::net_output_bytes),
      s.rejected_connections.load(), stats.reclaimed, s.Total(&WorkerStats::increments_folded),
      s.Total(&WorkerStats::folds), s.Total(&WorkerStats::output_limit_disconnects),
      s.Total(&WorkerStats::protocol_errors));
}

// "db<n>:keys=..,expires=..,avg_ttl=0" for each database that holds a counter (those past
// --databases too, kept from a run with more: they are stored, not reachable).
void KeyspaceSection(CommandContext& ctx, std::string& out) {
  out += "# Keyspace\r\n";
  const engine::Keyspace& keyspace = ctx.server.engine().keyspace();
  if (keyspace.size() == 0) return;
  for (uint32_t db = 0; db < engine::kMaxDatabases; ++db) {
    const size_t keys = keyspace.database_size(db);
    if (keys == 0) continue;
    fmt::format_to(std::back_inserter(out), "db{}:keys={},expires={},avg_ttl=0\r\n", db, keys,
                   keyspace.database_expiring(db));
  }
}

void DerivedSection(CommandContext& ctx, std::string& out) {
  out += "# Derived\r\n";
  derived::DerivedCounters* derived = ctx.server.derived();
  if (derived == nullptr) return;
  const std::vector<derived::CounterListing> counters = derived->Counters();
  size_t groups = 0;
  for (const derived::CounterListing& counter : counters) groups += counter.groups;
  fmt::format_to(std::back_inserter(out),
                 "derived_sources:{}\r\nderived_counters:{}\r\nderived_groups:{}\r\n"
                 "derived_changes_applied:{}\r\nderived_pushes_refused:{}\r\n",
                 derived->Sources().size(), counters.size(), groups, derived->changes_applied(),
                 derived->pushes_refused());
  for (const derived::CounterListing& counter : counters) {
    fmt::format_to(std::back_inserter(out), "counter_{}:source={},groups={}\r\n", counter.name,
                   counter.source, counter.groups);
  }
}

// Live subscriptions (SUBSCRIBE, /v1/events, /v1/subscribe), from the SubscriptionHub.
void SubscriptionsSection(CommandContext& ctx, std::string& out) {
  out += "# Subscriptions\r\n";
  const engine::SubscriptionHub* hub = ctx.server.subscriptions();
  if (hub == nullptr) return;
  const engine::SubscriptionStats stats = hub->stats();
  fmt::format_to(std::back_inserter(out),
                 "subscribers:{}\r\nsubscriptions:{}\r\nsubscription_pending_keys:{}\r\n"
                 "subscription_updates_sent:{}\r\nsubscriber_disconnects_max_pending:{}\r\n"
                 "subscriber_disconnects_max_queued_bytes:{}\r\n",
                 stats.subscribers, stats.subscriptions, stats.pending_keys, stats.updates_sent,
                 stats.disconnects, stats.queue_limit_disconnects);
}

// tallyd --source: the PostgreSQL source's figures as "source_<name>:<value>". Nothing
// (not even the header) without a source.
void SourceSection(CommandContext& ctx, std::string& out) {
  const StatusReporter& reporter = ctx.server.source_report();
  if (!reporter) return;
  out += "# Source\r\n";
  for (const ReportField& field : reporter()) {
    out += "source_";
    out += field.name;
    out += ':';
    std::visit(
        [&out](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            out += value ? '1' : '0';
          } else if constexpr (std::is_same_v<T, double>) {
            fmt::format_to(std::back_inserter(out), "{:.3f}", value);
          } else if constexpr (std::is_same_v<T, std::string>) {
            for (char c : value) out += (c == '\r' || c == '\n') ? ' ' : c;  // one line
          } else {
            fmt::format_to(std::back_inserter(out), "{}", value);
          }
        },
        field.value);
    out += "\r\n";
  }
}

void CommandStatsSection(CommandContext& ctx, std::string& out) {
  out += "# Commandstats\r\n";
  const auto commands = AllCommands();
  for (size_t i = 0; i < commands.size(); ++i) {
    const uint64_t calls = ctx.server.Calls(i);
    if (calls == 0) continue;
    fmt::format_to(std::back_inserter(out), "cmdstat_{}:calls={}\r\n", commands[i].name, calls);
  }
}

// Redis 7's errorstats: "errorstat_<KIND>:count=<n>" per kind of error reply.
void ErrorStatsSection(CommandContext& ctx, std::string& out) {
  out += "# Errorstats\r\n";
  for (const auto& [kind, count] : ctx.server.ErrorTotals()) {
    fmt::format_to(std::back_inserter(out), "errorstat_{}:count={}\r\n", kind, count);
  }
}

// The most-written counters of the last minute (engine/hot_keys.h), most first:
// "hotkey_<rank>:writes_per_sec=<rate>,writes=<n>[,db=<n>],key=<key>", the key last so
// that its commas and colons need no quoting (`\` and bytes outside printable ASCII as \xNN,
// core/escape.h); db= only for a database other than 0.
void HotKeysSection(CommandContext& ctx, std::string& out) {
  fmt::format_to(std::back_inserter(out), "# Hotkeys\r\nhotkeys_window_seconds:{}\r\n",
                 engine::HotKeys::kWindowSeconds);
  const std::vector<engine::HotKey> top =
      ctx.server.engine().hot_keys().Top(kInfoHotKeys, derived::IsInternalKey);
  for (size_t i = 0; i < top.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "hotkey_{}:writes_per_sec={:.2f},writes={},", i + 1,
                   top[i].writes_per_second, top[i].writes);
    const engine::DatabaseKey key = engine::SplitStoredKey(top[i].key);
    if (key.db != 0) fmt::format_to(std::back_inserter(out), "db={},", key.db);
    out += "key=";
    AppendPrintable(key.name, KeepUtf8::kNo, &out);
    out += "\r\n";
  }
}

struct InfoSection {
  std::string_view name;
  bool in_default;
  void (*write)(CommandContext&, std::string&);
};

constexpr InfoSection kSections[] = {
    {"server", true, ServerSection},
    {"clients", true, ClientsSection},
    {"memory", true, MemorySection},
    {"persistence", true, PersistenceSection},
    {"stats", true, StatsSection},
    {"commandstats", false, CommandStatsSection},
    {"keyspace", true, KeyspaceSection},
    {"derived", true, DerivedSection},
    {"subscriptions", true, SubscriptionsSection},
    {"source", true, SourceSection},
    {"errorstats", true, ErrorStatsSection},
    {"hotkeys", true, HotKeysSection},
    {"cluster", true, ClusterSection},
};

struct ConfigEntry {
  std::string_view name;
  std::string (*value)(const ServerOptions&);
};

const ConfigEntry kConfig[] = {
    {"bind", [](const ServerOptions& o) { return o.bind; }},
    {"port", [](const ServerOptions& o) { return std::to_string(o.port); }},
    {"maxclients", [](const ServerOptions& o) { return std::to_string(o.maxclients); }},
    {"timeout", [](const ServerOptions& o) { return std::to_string(o.timeout_seconds); }},
    {"requirepass", [](const ServerOptions& o) { return o.requirepass; }},
    {"proto-max-bulk-len",
     [](const ServerOptions& o) { return std::to_string(o.proto_max_bulk_len); }},
    {"client-query-buffer-limit",
     [](const ServerOptions& o) { return std::to_string(o.client_query_buffer_limit); }},
    {"client-output-buffer-limit",
     [](const ServerOptions& o) {
       return fmt::format("normal {} {} 0", o.client_output_buffer_limit,
                          o.client_output_buffer_limit);
     }},
    {"io-threads", [](const ServerOptions& o) { return std::to_string(o.workers); }},
    {"dir", [](const ServerOptions& o) { return o.data_dir; }},
    {"databases", [](const ServerOptions& o) { return std::to_string(o.databases); }},
    {"save", [](const ServerOptions&) { return std::string(); }},
    {"appendonly", [](const ServerOptions&) { return std::string("no"); }},
    {"maxmemory", [](const ServerOptions&) { return std::string("0"); }},
};

}  // namespace

void Command(CommandContext& ctx) {
  const auto all = AllCommands();
  if (ctx.args.size() == 1) {
    ctx.reply.ArrayHeader(all.size());
    for (const CommandSpec& spec : all) CommandInfo(ctx, spec);
    return;
  }
  const std::string_view sub = ctx.args[1];
  if (EqualsIgnoreCase(sub, "COUNT") && ctx.args.size() == 2) {
    ctx.reply.Integer(static_cast<int64_t>(all.size()));
  } else if (EqualsIgnoreCase(sub, "LIST")) {
    ctx.reply.ArrayHeader(all.size());
    for (const CommandSpec& spec : all) ctx.reply.Bulk(spec.name);
  } else if (EqualsIgnoreCase(sub, "INFO")) {
    if (ctx.args.size() == 2) {
      ctx.reply.ArrayHeader(all.size());
      for (const CommandSpec& spec : all) CommandInfo(ctx, spec);
      return;
    }
    ctx.reply.ArrayHeader(ctx.args.size() - 2);
    for (size_t i = 2; i < ctx.args.size(); ++i) {
      const CommandSpec* spec = FindCommand(ctx.args[i]);
      if (spec == nullptr) {
        ctx.reply.NullArray();
      } else {
        CommandInfo(ctx, *spec);
      }
    }
  } else if (EqualsIgnoreCase(sub, "GETKEYS") && ctx.args.size() >= 3) {
    CommandGetKeys(ctx);
  } else if (EqualsIgnoreCase(sub, "DOCS")) {
    std::vector<const CommandSpec*> wanted;
    if (ctx.args.size() == 2) {
      for (const CommandSpec& spec : all) wanted.push_back(&spec);
    } else {
      for (size_t i = 2; i < ctx.args.size(); ++i) {
        if (const CommandSpec* spec = FindCommand(ctx.args[i])) wanted.push_back(spec);
      }
    }
    ctx.reply.MapHeader(wanted.size());
    for (const CommandSpec* spec : wanted) CommandDocs(ctx, *spec);
  } else {
    ReplyUnknownSubcommand(ctx, "COMMAND");
  }
}

void Info(CommandContext& ctx) {
  std::vector<std::string> wanted;
  for (size_t i = 1; i < ctx.args.size(); ++i) {
    std::string name(ctx.args[i]);
    for (char& c : name) c = AsciiLower(c);
    wanted.push_back(std::move(name));
  }
  const bool everything = !wanted.empty() && (wanted[0] == "all" || wanted[0] == "everything");
  std::string out;
  for (const InfoSection& section : kSections) {
    const bool chosen =
        everything || (wanted.empty() || (wanted.size() == 1 && wanted[0] == "default")
                           ? section.in_default
                           : std::find(wanted.begin(), wanted.end(), section.name) != wanted.end());
    if (!chosen) continue;
    std::string text;
    section.write(ctx, text);
    if (text.empty()) continue;  // a section with nothing to show (# Source without --source)
    if (!out.empty()) out += "\r\n";
    out += text;
  }
  ctx.reply.Verbatim(out);
}

void Config(CommandContext& ctx) {
  const std::string_view sub = ctx.args[1];
  if (EqualsIgnoreCase(sub, "GET") && ctx.args.size() >= 3) {
    std::vector<const ConfigEntry*> matched;
    for (const ConfigEntry& entry : kConfig) {
      for (size_t i = 2; i < ctx.args.size(); ++i) {
        if (GlobMatch(ctx.args[i], entry.name, /*ignore_case=*/true)) {
          matched.push_back(&entry);
          break;
        }
      }
    }
    ctx.reply.MapHeader(matched.size());
    for (const ConfigEntry* entry : matched) {
      ctx.reply.Bulk(entry->name);
      ctx.reply.Bulk(entry->value(ctx.server.options()));
    }
  } else if (EqualsIgnoreCase(sub, "SET")) {
    ctx.reply.Error("ERR CONFIG SET is not supported by tally: restart tallyd with the option");
  } else {
    ReplyUnknownSubcommand(ctx, "CONFIG");
  }
}

void Time(CommandContext& ctx) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
  ctx.reply.ArrayHeader(2);
  ctx.reply.Bulk(std::to_string(micros / 1000000));
  ctx.reply.Bulk(std::to_string(micros % 1000000));
}

}  // namespace tally::redis::commands
