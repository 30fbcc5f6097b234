#include "servers/http/value_json.h"

namespace tally::http {

void WriteAggregate(const definitions::AggregateValue& value, JsonWriter* json) {
  switch (value.kind) {
    case definitions::AggregateValue::Kind::kNull:
      json->Null();
      return;
    case definitions::AggregateValue::Kind::kInteger:
      json->Int(value.integer);
      return;
    case definitions::AggregateValue::Kind::kDecimal:
    case definitions::AggregateValue::Kind::kTimestamp:
      json->String(value.text);
      return;
  }
}

void WriteValue(const derived::KeyValue& item, const std::vector<std::string>& names,
                JsonWriter* json) {
  if (item.shown.empty()) {
    json->Int(item.value);
  } else if (names.empty()) {
    WriteAggregate(item.shown.front(), json);
  } else {
    json->BeginObject();
    for (size_t i = 0; i < names.size(); ++i) {
      json->Key(names[i]);
      WriteAggregate(item.shown[i], json);
    }
    json->EndObject();
  }
}

}  // namespace tally::http
