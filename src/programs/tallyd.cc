// tallyd: the tally server. Reads its options (command line, --config file; tallyd_options.h)
// into NodeOptions, starts a Node (node.h), serves until SIGINT or SIGTERM, then stops the
// node, which commits and fsyncs everything before tallyd exits. SIGHUP reloads the TLS
// certificates. Exit status: 0 after a stop by signal, 1 when the node cannot start (the log
// says why), CLI11's for a bad option.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <string>

#include "programs/node.h"
#include "programs/tallyd_options.h"

namespace {

// Client connections are file descriptors, and so are RocksDB's files. As Redis does, tallyd
// raises its soft limit of open files to what --maxclients and --http-max-connections need
// plus a reserve, as far as the hard limit allows, and warns when that is not enough: a flood
// of connections could then take the descriptors RocksDB needs to write. A TLS client takes
// three (its socket and the two ends of its tunnel, tls_tunnel.h).
void RaiseOpenFilesLimit(int64_t maxclients, int64_t http_connections, bool tls) {
  constexpr int64_t kReserve = 1024;  // RocksDB's files, listeners, PostgreSQL, the event loops
  const int64_t per_client = tls ? 3 : 1;
  const auto wanted = static_cast<rlim_t>((maxclients + http_connections) * per_client + kReserve);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= wanted) return;
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  if (raised.rlim_cur > limit.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  if (limit.rlim_cur < wanted) {
    spdlog::warn(
        "open files limited to {} (ulimit -n, systemd LimitNOFILE): --maxclients {} plus "
        "--http-max-connections {}{} plus {} for the store need {}",
        limit.rlim_cur, maxclients, http_connections, tls ? ", 3 each over TLS," : "", kReserve,
        wanted);
  }
}

// Where clients reach the node, for the "ready" line of the log.
std::string Addresses(const tally::programs::Node& tallyd) {
  const std::string& redis_host = tallyd.options().redis.bind;
  const std::string& http_host = tallyd.options().http.bind;
  std::string where;
  if (tallyd.redis_port() != 0) {
    where += fmt::format("redis-cli -h {} -p {}", redis_host, tallyd.redis_port());
  }
  if (tallyd.redis_tls_port() != 0) {
    where += fmt::format("{}redis-cli --tls -h {} -p {}", where.empty() ? "" : ", ", redis_host,
                         tallyd.redis_tls_port());
  }
  if (tallyd.http_port() != 0) {
    where += fmt::format(", HTTP API on http://{}:{}/", http_host, tallyd.http_port());
  }
  if (tallyd.http_tls_port() != 0) {
    where += fmt::format(", HTTP API on https://{}:{}/", http_host, tallyd.http_tls_port());
  }
  return where;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tallyd: exact, durable counters over the Redis protocol, on an embedded RocksDB "
      "store"};
  app.get_formatter()->column_width(44);
  tally::programs::TallydOptions options;
  tally::programs::AddTallydOptions(app, &options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse <name>" of a name that is not an option.
    fmt::print(
        stderr,
        "tallyd: {}: {} (not a tallyd option, or a bad value; tallyd --help lists the options)\n",
        app.get_config_ptr()->as<std::string>(), e.what());
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  tally::programs::FinishTallydOptions(app, &options);
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  RaiseOpenFilesLimit(options.node.redis.maxclients, options.node.http.max_connections,
                      options.node.redis.tls_port != 0 || options.node.http.tls_port != 0);

  // Block the stop and reload signals in every thread (the node's start them); the main
  // thread waits for them below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  tally::programs::Node tallyd(std::move(options.node));
  if (auto status = tallyd.Start(); !status) {
    spdlog::critical("{}", status.error().message);
    return 1;
  }
  spdlog::info("tallyd ready: {} (durability={}, data in {})", Addresses(tallyd),
               options.durability, tallyd.data_dir());

  int signal = 0;
  for (;;) {
    sigwait(&signals, &signal);
    if (signal != SIGHUP) break;
    if (auto status = tallyd.ReloadTls(); status) {
      spdlog::info("SIGHUP: TLS certificates reloaded");
    } else {
      spdlog::error("SIGHUP: TLS certificates not reloaded (the previous ones stay): {}",
                    status.error().message);
    }
  }
  spdlog::info("signal {} received: stopping", signal);
  tallyd.Stop();
  spdlog::info("all counters committed; bye");
  return 0;
}
