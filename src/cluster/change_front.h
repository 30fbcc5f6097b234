// ChangeFront: what a cluster node's servers call for the derived counters' writes — the
// definitions and the pushed changes that go through the cluster's ordered change stream
// (change_feed.h has the whole story). Header only, so that the servers need no NATS.
//
// Threads: any; each call blocks its thread until its answer is known (a NATS round trip,
// then the wait for what it changed to be applied, bounded).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/derived/apply.h"
#include "engine/derived/catalog.h"
#include "engine/derived/change_json.h"
#include "engine/derived/family.h"
#include "engine/derived/verification_hold.h"

namespace tally::cluster {

class ChangeFront {
 public:
  virtual ~ChangeFront() = default;

  // A push (COUNTER.PUSH, POST /v1/changes; with `only_counter`, a backfill). Checked here
  // first (any error of DerivedCounters::PlanPush, nothing put in the stream); then put in
  // the stream once, by its `id` when it has one (a push resent with the same id, to any
  // node, within the idempotency window is the same push: counted once, answered as
  // duplicates); then answered once every partition it moves has applied it, as this node
  // sees them. kUnavailable when the stream does not take it (no quorum), or when it is in
  // the stream but not yet applied everywhere within the bound (it will be).
  virtual Result<derived::PushOutcome> Push(std::string_view body, std::string_view id,
                                            std::string_view only_counter,
                                            derived::ChangeDecoder& decoder) = 0;

  // A script of CREATE/DROP statements (COUNTER.DEFINE, POST /v1/definitions,
  // COUNTER.DROP), run by every node in the stream's order; answered with this node's
  // outcome once it has run it. SHOW statements are answered here.
  virtual Result<std::vector<derived::StatementOutcome>> Define(std::string_view script) = 0;

  // tally verify against a cluster (COUNTER.HOLD, RELEASE, REPAIR): the hold is set, moved
  // (`replace`) and released through the stream, in its order, on any node, and holds the
  // source's consumer wherever it runs; each is answered once this node has run it (Hold:
  // kUnavailable while another hold stands). ReportHold is the hold as this node sees it:
  // reached once the consumer has put everything up to the position in the stream and every
  // partition has applied it here. Repair sets groups of a plain counter, each by its
  // partition's owner, answered once every partition it moves has applied it as this node
  // sees them (errors of DerivedCounters::CheckRepair first, nothing put in the stream).
  virtual Status Hold(int64_t position, bool replace) = 0;
  virtual Status Release() = 0;
  virtual derived::HoldReport ReportHold() = 0;
  virtual Status Repair(std::string_view counter, std::span<const derived::KeyValue> values) = 0;
};

}  // namespace tally::cluster
