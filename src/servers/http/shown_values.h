// DerivedValueShower: what subscriptions send of a derived counter's group whose value is
// more than the integer its key holds — a min, max, avg, count(DISTINCT), numeric sum or
// several aggregates (engine/subscriptions.h, ValueShower). Its key holds only the group's
// rows (or its distinct values, or a numeric sum's units); the shower reads the group as
// COUNTER.GET and /v1/value read it and spells it for each protocol:
//   json  HTTP events' "value": 12, "12.75", "20240501T100000Z", null, or an object of the
//         aggregates by name (value_json.h)
//   text  a Redis message's payload: the one aggregate's spelling ("12.75", "NULL"), or
//         the same JSON object for several
//
// Callers: the subscription hub's flusher thread (Show) and, under the hub's lock,
// ShowsMore. Thread-safe: DerivedCounters' reads take no lock of the derived layer.
#pragma once

#include <span>
#include <string_view>

#include "engine/committer.h"
#include "engine/derived/derived_counters.h"
#include "engine/subscriptions.h"

namespace tally::http {

class DerivedValueShower final : public engine::ValueShower {
 public:
  // `derived` and `committer` must outlive the hub that holds this shower.
  DerivedValueShower(derived::DerivedCounters& derived, engine::Committer& committer)
      : derived_(derived), committer_(committer) {}

  bool ShowsMore(std::string_view key) const override { return derived_.ShowsMore(key); }

  // Reads each such update's group now and waits until what it read is durable. A group
  // of a counter dropped meanwhile keeps its integer.
  void Show(std::span<engine::SubscriptionUpdate> updates) override;

 private:
  derived::DerivedCounters& derived_;
  engine::Committer& committer_;
};

}  // namespace tally::http
