#include "engine/derived/change_writer.h"

#include <fmt/format.h>

#include <cmath>

#include "core/json_writer.h"
#include "core/timestamp.h"
#include "engine/definitions/numeric.h"

namespace tally::derived {
namespace {

namespace defs = tally::definitions;

Status WriteRow(const defs::SourceSchema& schema, std::span<const defs::Value> row,
                JsonWriter* json) {
  json->BeginObject();
  for (size_t i = 0; i < schema.columns.size() && i < row.size(); ++i) {
    const defs::Value& value = row[i];
    json->Key(schema.columns[i].name);
    switch (value.type) {
      case defs::Type::kNull:
        json->Null();
        break;
      case defs::Type::kInt64:
        json->Int(value.i);
        break;
      case defs::Type::kBool:
        json->Bool(value.i != 0);
        break;
      case defs::Type::kText:
        json->String(value.s);
        break;
      case defs::Type::kTimestamp:
        json->String(FormatTimestamp(value.i));
        break;
      case defs::Type::kNumeric:
        json->String(defs::FormatDecimal(value.i, value.scale));
        break;
      case defs::Type::kFloat:
        if (!std::isfinite(value.float_value())) {
          return InvalidArgument(fmt::format(
              "column {} of {} holds {}, which a cluster cannot carry (JSON has no spelling "
              "for it)",
              schema.columns[i].name, schema.name, value.float_value()));
        }
        json->Double(value.float_value());
        break;
    }
  }
  json->EndObject();
  return OkStatus();
}

}  // namespace

Status AppendChangeJson(const defs::SourceSchema& schema, const SourceRowChange& change,
                        std::string* out) {
  if (change.truncate) return InvalidArgument("a TRUNCATE is not a row change");
  JsonWriter json;
  json.BeginObject().Key("source").String(schema.name);
  if (change.old_row) {
    json.Key("old");
    if (auto status = WriteRow(schema, *change.old_row, &json); !status) return status;
  }
  if (change.new_row) {
    json.Key("new");
    if (auto status = WriteRow(schema, *change.new_row, &json); !status) return status;
  }
  json.EndObject();
  out->append(json.text());
  out->push_back('\n');
  return OkStatus();
}

}  // namespace tally::derived
