// tallyd's monitoring beyond what the engine and the servers register themselves: the
// derived counters', the PostgreSQL source's and the process's metrics, the live
// subscriptions' gauge, and the readiness check GET /readyz runs.
#pragma once

#include <cstdint>
#include <functional>
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

// tally_source_* of the PostgreSQL source, labelled {slot="<slot>"}: its position (the
// applied and received LSNs as numbers), its lag (bytes, seconds), whether it streams, its
// transactions, rows and reconnects. `source` must outlive the registry's last Render().
void RegisterSourceMetrics(const postgres::PostgresSource& source, std::string slot,
                           metrics::Registry& registry);

// tally_subscribers: live subscribers (Redis SUBSCRIBE/PSUBSCRIBE clients, HTTP streams).
void RegisterSubscriptionMetrics(const engine::SubscriptionHub& hub, metrics::Registry& registry);

// The readiness of a PostgreSQL source for GET /readyz: OK while it streams with its lag at
// most `max_lag_ms`; otherwise an error saying why in generic words (starting, backfilling,
// reconnecting, held for a verification, failed, or lagging by how much). GET /readyz is
// open, so the reason never holds the source's error text (hosts, users, databases).
Status SourceReadiness(const postgres::PostgresSource& source, int64_t max_lag_ms);

}  // namespace tally::programs
