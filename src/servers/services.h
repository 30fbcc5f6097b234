// Services: the parts of a node that a protocol server serves from. The node builds one and
// gives the same to the Redis server and the HTTP server at construction; each server's own
// settings (addresses, limits) are its options. Whatever is set must outlive the server; what
// is left null or empty is a part the node does not have, and the server answers the commands
// or routes that need it with an error.
#pragma once

#include <functional>

#include "cluster/change_front.h"
#include "cluster/routing.h"
#include "core/metrics.h"
#include "core/status.h"
#include "core/status_report.h"
#include "engine/derived/derived_counters.h"
#include "engine/engine.h"
#include "engine/subscriptions.h"
#include "servers/auth/acl.h"
#include "servers/tls/tls_context.h"

namespace tally::servers {

struct Services {
  explicit Services(engine::Engine& engine) : engine(engine) {}

  engine::Engine& engine;  // started
  // Loaded. Required by the HTTP server; without it the Redis server has no COUNTER.*
  // commands and refuses no key as derived.
  derived::DerivedCounters* derived = nullptr;
  // Live subscriptions: SUBSCRIBE and PSUBSCRIBE, GET /v1/events and /v1/subscribe.
  engine::SubscriptionHub* subscriptions = nullptr;
  // Each server adds its figures (tally_redis_*, tally_http_*); the HTTP server renders the
  // registry on GET /metrics. It must outlive its last Render().
  metrics::Registry* metrics = nullptr;
  // The PostgreSQL source's figures: INFO's "# Source" section, GET /v1/status's "source".
  StatusReporter source_report;
  // Users and permissions (--requirepass is the default user's password). Without one, each
  // server makes its own from its options' password.
  auth::Acl* acl = nullptr;
  // The node's certificates: a server with a TLS port serves it with them. Null without TLS.
  tls::TlsContext* tls = nullptr;
  // GET /readyz's checks beyond the store's health: an error means not ready and says why.
  // Called from the HTTP threads.
  std::function<Status()> readiness;
  // A cluster node's routes and topology (cluster/routing.h); null on a single node. With
  // it, a keyed request is served only for the slots this node serves (others get MOVED,
  // TRYAGAIN or CLUSTERDOWN) and the CLUSTER commands answer.
  cluster::Routing* cluster = nullptr;
  // A cluster node's front of the derived counters' writes (cluster/change_front.h): pushes
  // and definitions go through the cluster's change stream. Null on a single node.
  cluster::ChangeFront* cluster_changes = nullptr;
};

}  // namespace tally::servers
