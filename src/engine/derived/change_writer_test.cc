// The rows a cluster's source consumer writes (change_writer.h) read back by the change
// decoder as the very same values: every type, NULL, text that needs escaping, extreme
// numbers; what has no JSON spelling is refused.
#include "engine/derived/change_writer.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "engine/derived/change_json.h"

namespace tally::derived {
namespace {

namespace defs = tally::definitions;
using defs::Type;
using defs::Value;

const defs::SourceSchema& AllTypes() {
  static const defs::SourceSchema kSchema{"things",
                                          {{"i", Type::kInt64},
                                           {"b", Type::kBool},
                                           {"t", Type::kText},
                                           {"at", Type::kTimestamp},
                                           {"price", Type::kNumeric, 12, 2},
                                           {"f", Type::kFloat}}};
  return kSchema;
}

const SourceView* Lookup(std::string_view name) {
  static const SourceView kView{&AllTypes(), {"c", "c", "c", "c", "c", "c"}};
  return name == "things" ? &kView : nullptr;
}

bool Same(const Value& a, const Value& b) {
  return a.type == b.type && a.scale == b.scale && a.i == b.i && a.s == b.s;
}

void ExpectRoundTrip(const SourceRowChange& change) {
  std::string body;
  ASSERT_TRUE(AppendChangeJson(AllTypes(), change, &body));
  ChangeDecoder decoder;
  auto decoded = decoder.Decode(body, Lookup);
  ASSERT_TRUE(decoded) << body << "\n" << decoded.error().message;
  ASSERT_EQ(decoded->size(), 1u);
  const DecodedChange& got = (*decoded)[0];
  ASSERT_EQ(got.old_row.has_value(), change.old_row.has_value()) << body;
  ASSERT_EQ(got.new_row.has_value(), change.new_row.has_value()) << body;
  for (const auto& [want, have] :
       {std::pair{&change.old_row, &got.old_row}, std::pair{&change.new_row, &got.new_row}}) {
    if (!want->has_value()) continue;
    ASSERT_EQ((*want)->size(), (*have)->size());
    for (size_t i = 0; i < (*want)->size(); ++i) {
      EXPECT_TRUE(Same((**want)[i], (**have)[i]))
          << body << "\ncolumn " << AllTypes().columns[i].name << ": "
          << defs::DebugString((**want)[i]) << " came back as " << defs::DebugString((**have)[i]);
    }
  }
}

TEST(ChangeWriterTest, EveryTypeReadsBackTheSame) {
  SourceRowChange update;
  update.old_row = {Value::Int(std::numeric_limits<int64_t>::min()),
                    Value::Bool(false),
                    Value::Text("quote \" backslash \\ colon : newline \n tab \t é ∑"),
                    Value::Timestamp(1'714'571'107'123'456),
                    Value::Numeric(-5, 2),
                    Value::Float(0.1)};
  update.new_row = {Value::Int(std::numeric_limits<int64_t>::max()),
                    Value::Bool(true),
                    Value::Text(""),
                    Value::Timestamp(-62'135'596'800'000'000),
                    Value::Numeric(123456789012, 2),
                    Value::Float(-1e300)};
  ExpectRoundTrip(update);
  SourceRowChange insert;
  insert.new_row = {Value::Null(), Value::Null(), Value::Null(),
                    Value::Null(), Value::Null(), Value::Float(3.0)};
  ExpectRoundTrip(insert);
  SourceRowChange del;
  del.old_row = {Value::Int(7),        Value::Bool(true),
                 Value::Text("\x01"),  Value::Timestamp(0),
                 Value::Numeric(0, 2), Value::Float(std::numeric_limits<double>::denorm_min())};
  ExpectRoundTrip(del);
}

TEST(ChangeWriterTest, WhatJsonCannotSpellIsRefused) {
  std::string body = "kept";
  SourceRowChange nan;
  nan.new_row = {Value::Int(1), Value::Null(), Value::Null(),
                 Value::Null(), Value::Null(), Value::Float(std::nan(""))};
  auto refused = AppendChangeJson(AllTypes(), nan, &body);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("column f of things"), std::string::npos)
      << refused.error().message;
  SourceRowChange truncate;
  truncate.truncate = true;
  EXPECT_FALSE(AppendChangeJson(AllTypes(), truncate, &body));
  EXPECT_EQ(body, "kept");
}

}  // namespace
}  // namespace tally::derived
