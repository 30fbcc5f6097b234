// The engine's figures as metrics: the commit path (batch sizes and latency histograms, fed
// by a commit observer; commits, failures, store health), checkpoints, the keyspace
// (counters resident, expiring, expired, memory, increments applied) and the hottest
// counters. The names are listed in docs/dashboard-and-metrics.md ("The metrics").
#pragma once

#include <functional>
#include <string_view>

#include "core/metrics.h"
#include "engine/engine.h"

namespace tally::engine {

// Registers the engine's metrics in `registry`. `hide` leaves keys out of the hot-key
// series (tally's own records); may be empty. `engine` must outlive the registry's last
// Render(). Call before the engine commits anything that should be counted.
void RegisterEngineMetrics(Engine& engine, metrics::Registry& registry,
                           std::function<bool(std::string_view)> hide = {});

// How many hot keys the metrics list (INFO and GET /v1/hot choose their own).
inline constexpr size_t kHotKeyMetricSeries = 10;

}  // namespace tally::engine
