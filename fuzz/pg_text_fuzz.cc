// libFuzzer target for PostgreSQL's text output as tally reads it (ParsePgText, the cells of
// pgoutput tuples): the input is one cell's text, read as every type tally takes. Properties:
//   - integers: accepted exactly when they are an optional '-' and digits within int64 (a
//     second reading with std::from_chars), with the same value; numeric the same, with an
//     all-zero fraction allowed; bool exactly "t" and "f"; text types as sent, every byte;
//   - a date, timestamp or timestamptz read, then written again as PostgreSQL writes it,
//     reads back the same instant;
//   - a client's timestamp reader (ParseKeyPart) reads the same text as the same instant;
//   - a type tally cannot read is refused by name; every error is kInvalidArgument.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "core/calendar.h"
#include "engine/derived/key_part.h"
#include "fuzz_check.h"
#include "sources/postgres/pg_types.h"

namespace tally::postgres {
namespace {

using definitions::Type;
using definitions::Value;
using fuzz::Check;

// An optional '-' and digits within int64, read by the standard library.
std::optional<int64_t> Decimal(std::string_view text) {
  const size_t digits = text.starts_with('-') ? 1 : 0;
  if (text.size() == digits) return std::nullopt;
  for (size_t i = digits; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
  }
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<int64_t> Numeric(std::string_view text) {
  const size_t dot = text.find('.');
  if (dot == std::string_view::npos) return Decimal(text);
  const std::string_view fraction = text.substr(dot + 1);
  if (fraction.empty() || fraction.find_first_not_of('0') != std::string_view::npos) {
    return std::nullopt;
  }
  return Decimal(text.substr(0, dot));
}

std::optional<int64_t> IntOf(const Result<Value>& result) {
  if (!result) return std::nullopt;
  Check(result->type == Type::kInt64, "an integer type gives an int64");
  return result->i;
}

// `micros` as PostgreSQL writes a timestamp (DateStyle ISO), "+00" after it for a
// timestamptz, the date alone for a date at midnight; nullopt before year 1 (PostgreSQL
// would write BC, which tally refuses).
std::optional<std::string> PgText(int64_t micros, uint32_t type_oid) {
  const int64_t in_day = FloorMod(micros, kMicrosPerDay);
  const CivilDate date = CivilFromDays(FloorDiv(micros, kMicrosPerDay));
  if (date.year < 1) return std::nullopt;
  char text[64];
  int n = std::snprintf(text, sizeof text, "%04lld-%02d-%02d", static_cast<long long>(date.year),
                        date.month, date.day);
  // A date's text with a time of day is read as that instant (one timestamp reader).
  if (type_oid != kDateOid || in_day != 0) {
    const int64_t seconds = in_day / kMicrosPerSecond;
    n += std::snprintf(
        text + n, sizeof text - n, " %02lld:%02lld:%02lld", static_cast<long long>(seconds / 3600),
        static_cast<long long>(seconds / 60 % 60), static_cast<long long>(seconds % 60));
    if (const int64_t fraction = in_day % kMicrosPerSecond; fraction != 0) {
      n += std::snprintf(text + n, sizeof text - n, ".%06lld", static_cast<long long>(fraction));
    }
    if (type_oid == kTimestamptzOid) n += std::snprintf(text + n, sizeof text - n, "+00");
  }
  return std::string(text, static_cast<size_t>(n));
}

void CheckTime(uint32_t type_oid, std::string_view text) {
  auto value = ParsePgText(type_oid, text);
  if (!value) return;
  Check(value->type == Type::kTimestamp, "a time type gives a timestamp", text);
  if (const std::optional<std::string> written = PgText(value->i, type_oid)) {
    auto again = ParsePgText(type_oid, *written);
    Check(again && again->i == value->i, "a time written as PostgreSQL does reads back", *written);
  }
  std::string storage;
  auto client = derived::ParseKeyPart(Type::kTimestamp, text, &storage);
  if (client && !client->is_null()) {
    Check(client->i == value->i, "both timestamp readers read the same instant", text);
  }
}

void CheckText(std::string_view text) {
  for (const uint32_t oid : {kInt2Oid, kInt4Oid, kInt8Oid}) {
    Check(IntOf(ParsePgText(oid, text)) == Decimal(text), "an integer reads as decimal", text);
  }
  Check(IntOf(ParsePgText(kNumericOid, text)) == Numeric(text), "a numeric reads as an integer",
        text);
  auto flag = ParsePgText(kBoolOid, text);
  Check(flag.has_value() == (text == "t" || text == "f"), "a bool is t or f", text);
  if (flag) Check(flag->i == (text == "t" ? 1 : 0), "t is true and f false", text);
  for (const uint32_t oid : {kTextOid, kVarcharOid, kBpcharOid, kNameOid}) {
    auto same = ParsePgText(oid, text);
    Check(same && same->type == Type::kText && same->s.data() == text.data() &&
              same->s.size() == text.size(),
          "text is as sent", text);
  }
  for (const uint32_t oid : {kDateOid, kTimestampOid, kTimestamptzOid}) CheckTime(oid, text);
  for (const uint32_t oid : {kInt2Oid, kNumericOid, kBoolOid, kDateOid, kTimestamptzOid, 114u}) {
    auto result = ParsePgText(oid, text);
    if (!result) {
      Check(result.error().code == ErrorCode::kInvalidArgument, "a bad value is kInvalidArgument",
            result.error().message);
    }
  }
}

}  // namespace
}  // namespace tally::postgres

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tally::postgres::CheckText(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
