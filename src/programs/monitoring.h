// tallyd's monitoring beyond what the engine and the servers register themselves: the
// derived counters', the PostgreSQL source's and the process's metrics, the live
// subscriptions' gauge, and the readiness check GET /readyz runs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/metrics.h"
#include "core/status.h"
#include "engine/derived/derived_counters.h"
#include "engine/subscriptions.h"
#include "sources/postgres/postgres_source.h"

namespace tally::programs {

// tally_resident_memory_bytes, tally_start_time_seconds.
void RegisterProcessMetrics(metrics::Registry& registry);

// tally_changes_total{origin}, tally_derived_keys_written_total,
// tally_derived_pushes_refused_total. `derived` must outlive the registry's last Render().
void RegisterDerivedMetrics(derived::DerivedCounters& derived, metrics::Registry& registry);

// The figures of the PostgreSQL source consumed on this node; nullopt while it is consumed
// elsewhere (a cluster node that does not own partition 0, cluster/source_runner.h).
using SourceStatsReader = std::function<std::optional<postgres::PostgresSource::Stats>()>;

// tally_source_* of the PostgreSQL source, labelled {slot="<slot>"}: whether this node
// consumes it (tally_source_consumer), and where it does, its position (the applied and
// received LSNs as numbers), its lag (bytes, seconds), whether it streams, its
// transactions, rows and reconnects; elsewhere those have no sample. `read` is called at
// every Render(), on the scraping thread.
void RegisterSourceMetrics(SourceStatsReader read, std::string slot, metrics::Registry& registry);

// tally_subscribers: live subscribers (Redis SUBSCRIBE/PSUBSCRIBE clients, HTTP streams).
void RegisterSubscriptionMetrics(const engine::SubscriptionHub& hub, metrics::Registry& registry);

// The readiness of a PostgreSQL source for GET /readyz, from its figures: OK while it
// streams with its lag at most `max_lag_ms`; otherwise an error saying why in generic words
// (starting, backfilling, reconnecting, held for a verification, failed, or lagging by how
// much). GET /readyz is open, so the reason never holds the source's error text (hosts,
// users, databases).
Status SourceReadiness(const postgres::PostgresSource::Stats& stats, int64_t max_lag_ms);

}  // namespace tally::programs
