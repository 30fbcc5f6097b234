// The aggregates beyond a plain count or sum, as the formula sees them: what one row adds to
// or takes from its group's state, and how an aggregate's value reads.
//
// A plain counter (Layout::kPlain) gets increments of its one value (formula.h). A counter
// of layout kDistinct or kComposite gets RecordDeltas instead (AppendRecordDeltas, also in
// formula.h): changes to the records that
// make up its group's state, each additive, so that the same old/new formula keeps them:
//
//   rows               kComposite: the group's rows passing WHERE          (±1 a row)
//   sum of aggregate i sum(x) and avg(x): the sum of x, in units of its scale (±x)
//   count of agg. i    count(x), sum(x) and avg(x): the rows whose x is not NULL (±1); a
//                      sum without such rows is NULL, as in PostgreSQL
//   value v of agg. i  count(DISTINCT x), min(x), max(x): the rows whose x is v (±1)
//
// A row whose argument is NULL adds nothing to that aggregate. From these records the
// derived layer (engine/derived/aggregate_state.h) keeps what is read: a distinct count
// moves when a value's rows go 0 -> 1 or 1 -> 0; min and max are the first and last value
// with rows; avg is sum / count.
//
// Values of count(DISTINCT), min and max are kept as ValueBytes, an encoding whose byte
// order is the values' order: int64, timestamp and numeric as 8 bytes, big-endian with the
// sign bit flipped (a numeric in units of the aggregate's scale); bool as one byte; text as
// its own bytes (bytewise order, COLLATE "C").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/program.h"

namespace tally::definitions {

// Which record of a group's state a delta changes.
enum class RecordKind : uint8_t {
  kRows,   // the group's rows (kComposite); `aggregate` is 0
  kSum,    // the sum of aggregate `aggregate`'s argument
  kCount,  // its non-NULL rows
  kValue,  // the rows whose argument is `value` (ValueBytes)
};

// One change of one record of one group's state.
struct RecordDelta {
  std::string group;  // the canonical key of the group (EncodeKey)
  uint32_t aggregate = 0;
  RecordKind kind = RecordKind::kRows;
  std::string value;  // kValue: the argument's ValueBytes
  int64_t delta = 0;  // never 0

  bool operator==(const RecordDelta&) const = default;
};

// The name of one record of a group's state, as the record keys of the derived layer end
// (engine/derived/aggregate_state.h) and as COUNTER.REPAIRSTATE spells a record:
//
//   tag := <i> "s"                 the sum of aggregate i's argument
//        | <i> "n"                 its rows whose argument is not NULL
//        | <i> "v" <ValueBytes>    its rows whose argument is that value
//
// where i is the aggregate's index in the select list, from 0, in decimal. (A composite
// group's rows have no tag: its key holds them.)
struct RecordTag {
  uint32_t aggregate = 0;
  RecordKind kind = RecordKind::kSum;  // kSum, kCount or kValue
  std::string_view value;              // kValue's ValueBytes
};
// Appends the tag of a record to `out`. REQUIRES: kind is not kRows.
void AppendRecordTag(uint32_t aggregate, RecordKind kind, std::string_view value, std::string* out);
// nullopt for bytes that are not a well-formed tag; `value` views `tag`.
std::optional<RecordTag> ParseRecordTag(std::string_view tag);
// Whether `counter` keeps record `tag` (the formula's rule: count(x) a count; sum(x) and
// avg(x) a sum and a count; count(DISTINCT x), min(x) and max(x) values, whose ValueBytes
// must be what ValueBytes makes of the argument's type: 8 bytes for an int64, numeric or
// timestamp, one byte 0 or 1 for a bool, any bytes for a text). kInvalidArgument saying
// why not. REQUIRES: `counter` is not plain.
Status CheckRecordTag(const CompiledCounter& counter, const RecordTag& tag);

// The ValueBytes of a non-NULL argument `value` of aggregate `column`; kOverflow when a
// numeric does not fit the aggregate's scale.
Result<std::string> ValueBytes(const AggregateColumn& column, const Value& value);
// The int64 of 8 ValueBytes (an int64, a timestamp's microseconds, a numeric's units).
// REQUIRES: bytes.size() == 8.
int64_t IntOfValueBytes(std::string_view bytes);

// One aggregate's value as a read shows it.
struct AggregateValue {
  enum class Kind : uint8_t {
    kNull,       // no value: min, max or avg of a group without a non-NULL argument
    kInteger,    // `integer`: a count, a sum or min/max of int64
    kDecimal,    // `text`: a numeric sum, min or max ("1234.50"), an avg ("4.5000000000000000")
    kTimestamp,  // `integer` microseconds, `text` its spelling ("20240501T134500Z")
  };
  Kind kind = Kind::kNull;
  int64_t integer = 0;
  std::string text;

  static AggregateValue Null() { return {}; }
  static AggregateValue Integer(int64_t v) { return {Kind::kInteger, v, {}}; }
  static AggregateValue Decimal(std::string text) { return {Kind::kDecimal, 0, std::move(text)}; }
  static AggregateValue Timestamp(int64_t micros);
  bool operator==(const AggregateValue&) const = default;
};

// A group's value: one AggregateValue per aggregate of its counter, in order.
using GroupValue = std::vector<AggregateValue>;

// The value of a count or sum aggregate `column` whose total is `total` (a numeric sum's
// in units of its scale).
AggregateValue ShowTotal(const AggregateColumn& column, int64_t total);
// The value of min or max `column` whose extreme value has the ValueBytes `bytes`.
AggregateValue ShowValueBytes(const AggregateColumn& column, std::string_view bytes);
// The value of avg `column` of `count` values summing to `sum` (units of its scale); NULL
// when count is 0.
AggregateValue ShowAverage(const AggregateColumn& column, int64_t sum, int64_t count);

// True when `counter`'s value is one integer, its key's value as it stands (count(*),
// count(x), sum of an int64): reads show the number itself. Every other counter's value is
// shown as a GroupValue.
bool ShowsInteger(const CompiledCounter& counter);

// -1, 0 or 1 ordering two values of one aggregate: NULL below every value, integers and
// timestamps by number, decimals exactly by their spelling.
int CompareValues(const AggregateValue& a, const AggregateValue& b);

// The value of a plain counter whose key holds `value`.
GroupValue ShowPlain(const CompiledCounter& counter, int64_t value);

// The spelling of one value on one line, for messages and tally verify: "42", "1234.50",
// "20240501T134500Z", "NULL".
std::string ValueText(const AggregateValue& value);
// A group's value on one line: one aggregate as ValueText, several as "(3, 12.50, NULL)".
std::string GroupText(const GroupValue& value);

}  // namespace tally::definitions
