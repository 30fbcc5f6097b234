// tallyd's options: the command line and the --config file, read by CLI11 into NodeOptions.
// tallyd declares them here, and so does the config file's fuzzer (fuzz/tallyd_config_fuzz.cc),
// so that it reads files exactly as tallyd does.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "programs/node.h"

namespace tally::programs {

// What tallyd's options set: the node's options, and those read as text first.
struct TallydOptions {
  NodeOptions node;
  std::string log_level = "info";  // --log-level, a name spdlog knows
  // Read into `node` by FinishTallydOptions.
  std::string durability = "sync";
  std::string group_commit = "inline";
  int64_t idempotency_window_seconds = 24 * 3600;
  int64_t source_ack_interval_ms = 0;    // its default is the node's, set by AddTallydOptions
  std::string tls_auth_clients = "yes";  // yes, no or optional
  std::string plain_ports = "yes";       // no: the TLS ports only
  std::string protected_mode = "yes";    // no: clients from anywhere without a password
};

// Declares every option of tallyd on `app` (--config and --version too), to be read into
// `*options`, which must outlive app's parsing. Sizes ("64mb") are read by ParseByteSize; a
// value out of its option's range or choices is an error of that option (CLI::ParseError).
void AddTallydOptions(CLI::App& app, TallydOptions* options);

// After app.parse(...) succeeded: what follows from the options read (durability and group
// commit into the engine's options, the idempotency window in ms, the HTTP address defaulting
// to --bind, one password for both protocols, the config file's name, the source's ack
// interval, the TLS client authentication, whether the plain ports listen, protected mode).
void FinishTallydOptions(const CLI::App& app, TallydOptions* options);

}  // namespace tally::programs
