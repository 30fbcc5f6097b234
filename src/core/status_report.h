// StatusReport: named figures of a component, in a fixed order, for both INFO (as
// "prefix_name:value" lines) and the HTTP status (as a JSON object). The producer (say the
// PostgreSQL source) fills it; the servers render it without depending on the producer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace tally {

// bool: INFO writes 0/1, JSON true/false. double: INFO writes 3 decimals.
using ReportValue = std::variant<bool, int64_t, uint64_t, double, std::string>;

struct ReportField {
  std::string name;  // [a-z_]+, without the section's prefix
  ReportValue value;
};

using StatusReport = std::vector<ReportField>;

// Produces a report on demand, from any thread. Empty function = nothing to report.
using StatusReporter = std::function<StatusReport()>;

}  // namespace tally
