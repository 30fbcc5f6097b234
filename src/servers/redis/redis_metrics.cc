#include "servers/redis/redis_metrics.h"

namespace tally::redis {

void RegisterRedisMetrics(ServerCore& core, metrics::Registry& registry) {
  using metrics::SampleWriter;
  using metrics::Type;
  registry.AddGauge("tally_redis_connected_clients", "Redis-protocol clients connected.",
                    [&core] { return static_cast<double>(core.clients().size()); });
  registry.AddCollector("tally_redis_connections_received_total",
                        "Redis-protocol connections accepted.", Type::kCounter,
                        [&core](SampleWriter& out) { out.Add(core.connections_received.load()); });
  registry.AddCollector("tally_redis_rejected_connections_total",
                        "Redis-protocol connections refused (maxclients).", Type::kCounter,
                        [&core](SampleWriter& out) { out.Add(core.rejected_connections.load()); });
  registry.AddCollector(
      "tally_redis_commands_total",
      "Redis commands run, by name (refused before running, e.g. unknown or wrong arity: not "
      "counted here, see tally_redis_errors_total).",
      Type::kCounter, [&core](SampleWriter& out) {
        const auto commands = AllCommands();
        for (size_t i = 0; i < commands.size(); ++i) {
          const uint64_t calls = core.Calls(i);
          if (calls > 0) out.Add({{"command", std::string(commands[i].name)}}, calls);
        }
      });
  registry.AddCollector("tally_redis_errors_total",
                        "Redis error replies, by kind (the reply's first word: ERR, WRONGTYPE, "
                        "NOAUTH, EXECABORT, ...).",
                        Type::kCounter, [&core](SampleWriter& out) {
                          for (const auto& [kind, count] : core.ErrorTotals()) {
                            out.Add({{"kind", kind}}, count);
                          }
                        });
  registry.AddCollector(
      "tally_redis_net_input_bytes_total", "Bytes read from Redis clients.", Type::kCounter,
      [&core](SampleWriter& out) { out.Add(core.Total(&WorkerStats::net_input_bytes)); });
  registry.AddCollector(
      "tally_redis_net_output_bytes_total", "Bytes sent to Redis clients.", Type::kCounter,
      [&core](SampleWriter& out) { out.Add(core.Total(&WorkerStats::net_output_bytes)); });
}

}  // namespace tally::redis
