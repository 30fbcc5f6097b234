#include "servers/http/shown_values.h"

#include <algorithm>
#include <string>

#include "engine/derived/derived_keyspace.h"
#include "servers/http/value_json.h"

namespace tally::http {

void DerivedValueShower::Show(std::span<engine::SubscriptionUpdate> updates) {
  uint64_t required_epoch = 0;
  for (engine::SubscriptionUpdate& update : updates) {
    if (!derived_.ShowsMore(update.key)) continue;
    auto page = derived_.Read(derived::FamilyName(update.key), {&update.key, 1});
    if (!page || page->items.empty()) continue;  // dropped meanwhile
    required_epoch = std::max(required_epoch, page->required_epoch);
    const derived::KeyValue& group = page->items.front();
    JsonWriter json;
    WriteValue(group, page->names, &json);
    engine::ShownValue shown;
    shown.json = json.Take();
    shown.text = page->names.empty() && !group.shown.empty()
                     ? definitions::ValueText(group.shown.front())
                     : shown.json;
    update.shown = std::move(shown);
  }
  if (required_epoch != 0) committer_.WaitDurable(required_epoch);
}

}  // namespace tally::http
