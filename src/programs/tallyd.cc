// tallyd: the tally server. Reads its options (command line, --config file; tallyd_options.h)
// into NodeOptions, starts a Node (node.h), serves until SIGINT or SIGTERM, then stops the
// node, which commits and fsyncs everything before tallyd exits. Exit status: 0 after a stop by
// signal, 1 when the node cannot start (the log says why), CLI11's for a bad option.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>

#include "programs/node.h"
#include "programs/tallyd_options.h"

int main(int argc, char** argv) {
  CLI::App app{
      "tallyd: exact, durable counters over the Redis protocol, on an embedded RocksDB "
      "store"};
  app.get_formatter()->column_width(44);
  tally::programs::TallydOptions options;
  tally::programs::AddTallydOptions(app, &options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  tally::programs::FinishTallydOptions(app, &options);
  spdlog::set_level(spdlog::level::from_str(options.log_level));

  // Block the stop signals in every thread (the node's start them); the main thread waits
  // for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  tally::programs::Node tallyd(std::move(options.node));
  if (auto status = tallyd.Start(); !status) {
    spdlog::critical("{}", status.error().message);
    return 1;
  }
  spdlog::info(
      "tallyd ready: redis-cli -h {} -p {}, HTTP API on http://{}:{}/ (durability={}, "
      "data in {})",
      tallyd.options().redis.bind, tallyd.redis_port(), tallyd.options().http.bind,
      tallyd.http_port(), options.durability, tallyd.data_dir());

  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("signal {} received: stopping", signal);
  tallyd.Stop();
  spdlog::info("all counters committed; bye");
  return 0;
}
