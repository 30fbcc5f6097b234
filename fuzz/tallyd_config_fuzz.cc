// libFuzzer target for tallyd --config: the input is a config file ("name = value" lines,
// CLI11's TOML-like format, sections and arrays included), read by CLI11 into tallyd's own
// options (programs/tallyd_options.h, as tallyd declares them). Properties:
//   - a bad file is refused with a CLI::ParseError, never another exception (libFuzzer
//     reports any other as a crash);
//   - (not checked: that CLI11's config_to_str writes back what was read. tallyd never
//     writes a config, and the first run found CLI11 2.1's writer does not round-trip an
//     array value holding quotes and '#': seed regression_config_to_str.)
//   - the options then mapped to the node's (FinishTallydOptions) are within what the node
//     takes: sizes not negative, a log level spdlog knows.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz_check.h"
#include "programs/tallyd_options.h"

namespace tally::programs {
namespace {

using fuzz::Check;

// Reads `config` as tallyd reads its --config file: false when it is refused.
bool Read(const std::string& config, TallydOptions* options) {
  CLI::App app{"tallyd"};
  AddTallydOptions(app, options);
  std::istringstream input(config);
  try {
    app.parse_from_stream(input);
  } catch (const CLI::ParseError&) {
    return false;
  }
  FinishTallydOptions(app, options);
  return true;
}

void FuzzConfig(const std::string& config) {
  TallydOptions options;
  if (!Read(config, &options)) return;
  const NodeOptions& node = options.node;
  Check(node.redis.proto_max_bulk_len >= 0 && node.redis.client_query_buffer_limit >= 0 &&
            node.redis.client_output_buffer_limit >= 0,
        "a size is not negative", config);
  Check(spdlog::level::from_str(options.log_level) != spdlog::level::off ||
            options.log_level == "off",
        "the log level is one spdlog knows", options.log_level);
}

}  // namespace
}  // namespace tally::programs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tally::programs::FuzzConfig(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
