// A derived counter's group value as JSON: the form of "value" in every HTTP answer and
// event that carries one (reads, range reads, subscription events).
#pragma once

#include <string>
#include <vector>

#include "core/json_writer.h"
#include "engine/definitions/aggregate.h"
#include "engine/derived/family.h"

namespace tally::http {

// One aggregate's value: a number, a decimal or a timestamp as a string ("1234.50",
// "20240501T134500Z": a JSON number would not keep a decimal exact), NULL as null.
void WriteAggregate(const definitions::AggregateValue& value, JsonWriter* json);

// A group's value: the integer, the one aggregate's value, or with several aggregates
// (`names`, Page::names) an object of their values by name.
void WriteValue(const derived::KeyValue& item, const std::vector<std::string>& names,
                JsonWriter* json);

}  // namespace tally::http
