// From pgoutput's tuples to tally's rows: which PostgreSQL types feed which tally column
// types, the parsing of PostgreSQL's text output into definitions::Value, the mapping of a
// relation's columns onto a source's columns and the conversion of one tuple into a row.
//
// The text formats parsed are PostgreSQL's output with DateStyle ISO (the replication
// connection must set it, and TimeZone UTC to keep offsets short; any offset is handled).
// Dates and timestamps are read by tally's one timestamp reader (core/timestamp.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/program.h"
#include "engine/definitions/value.h"
#include "sources/postgres/pgoutput.h"

namespace tally::postgres {

// The built-in type OIDs tally reads (pg_type.oid, fixed since PostgreSQL 7).
inline constexpr uint32_t kBoolOid = 16;
inline constexpr uint32_t kNameOid = 19;
inline constexpr uint32_t kInt8Oid = 20;
inline constexpr uint32_t kInt2Oid = 21;
inline constexpr uint32_t kInt4Oid = 23;
inline constexpr uint32_t kTextOid = 25;
inline constexpr uint32_t kBpcharOid = 1042;
inline constexpr uint32_t kVarcharOid = 1043;
inline constexpr uint32_t kDateOid = 1082;
inline constexpr uint32_t kTimestampOid = 1114;
inline constexpr uint32_t kTimestamptzOid = 1184;
inline constexpr uint32_t kNumericOid = 1700;
inline constexpr uint32_t kFloat4Oid = 700;
inline constexpr uint32_t kFloat8Oid = 701;

// The tally type a PostgreSQL type feeds, or nullopt when tally cannot read it:
// int2/int4/int8/numeric → int64, bool → bool, text/varchar/bpchar/name → text,
// date/timestamp/timestamptz → timestamp. (numeric is checked per value: it must be an
// integer within int64.) Besides, a numeric(p,s) source column takes int2/int4/int8 and
// numeric, and a float one float4 and float8 (Feeds).
std::optional<definitions::Type> TallyTypeForPg(uint32_t type_oid);

// True when a column of PostgreSQL type `type_oid` can feed a source column of `type`.
bool Feeds(uint32_t type_oid, definitions::Type type);

// The PostgreSQL name of a type ("int4", "timestamptz", "jsonb"), or "type oid N" for one
// this table does not know (a user-defined type).
std::string PgTypeName(uint32_t type_oid);

// Parses one non-NULL cell sent in text format by a column of type `type_oid` into the
// value of TallyTypeForPg(type_oid). Text values are views into `text`. InvalidArgument
// naming the value when it does not parse or does not fit:
//   int2/int4/int8  optional '-' and digits, within int64
//   numeric         an integer within int64; a zero fraction is accepted ("12.000" is 12,
//                   as numeric equality says), "12.5", NaN and ±Infinity are refused
//   bool            "t" or "f"
//   text types      as sent (bpchar keeps its padding)
//   date, timestamp, timestamptz
//                   as ParseTimestamp reads them; PostgreSQL sends "YYYY-MM-DD" (midnight
//                   UTC), "YYYY-MM-DD HH:MM:SS[.ffffff]" (taken as UTC) and the same with
//                   an offset "+HH", "+HH:MM" or "+HH:MM:SS". Years have 4 or more digits;
//                   " BC" dates and ±infinity are refused. The message is "<type> value
//                   '<text>' <why ParseTimestamp refuses it>".
// Timestamps are microseconds since the Unix epoch.
Result<definitions::Value> ParsePgText(uint32_t type_oid, std::string_view text);

// Parses one non-NULL cell for a source column: ParsePgText, but for a numeric(p,s)
// column the value's units at scale s (definitions::ParseDecimal: exact, at most s digits
// after the point), and for a float column a double ("NaN" and "±Infinity" too).
Result<definitions::Value> ParsePgCell(uint32_t type_oid,
                                       const definitions::SourceSchema::Column& column,
                                       std::string_view text);

// How a source's columns are read from one relation's tuples. Built from the Relation
// message; rebuilt whenever a new Relation message for the oid arrives.
struct ColumnMapping {
  uint32_t relation_oid = 0;
  std::string table;            // the relation's qualified name, for messages
  size_t relation_columns = 0;  // the tuple width the relation announced
  struct Source {
    std::string name;           // the column's name (same in both)
    size_t relation_index = 0;  // its position in the relation's tuples, or kAbsent
    uint32_t type_oid = 0;      // its PostgreSQL type
    definitions::Type type = definitions::Type::kNull;  // its tally type
    int scale = 0;                                      // a numeric column's
  };
  std::vector<Source> columns;                 // one per source column, in source order
  static constexpr size_t kAbsent = SIZE_MAX;  // a column no counter reads, not in the table
};

// Maps each column of `schema` to the relation column of the same name (names compare
// exactly, as PostgreSQL stores them). InvalidArgument naming the table and column when a
// source column is missing from the relation, or naming the table, column, PostgreSQL
// type and tally type when the types do not fit. Relation columns the source does not
// declare are ignored. With `needed` (one flag per source column: does a counter read
// it?), a column no counter reads may be missing or of another type: it reads as NULL
// (kAbsent), so dropping a column nobody counts does not stop the source.
Result<ColumnMapping> MapColumns(const RelationMessage& relation,
                                 const definitions::SourceSchema& schema,
                                 const std::vector<bool>& needed = {});

// Converts `tuple` into a row in source order, replacing `*row`. Unchanged-TOAST cells
// are taken from the same column of `old_tuple` (nullptr: none); it is an error when the
// old tuple is missing or has no value there. Text values are views into the tuples'
// buffers. kCorruption when the tuple's width is not the relation's; InvalidArgument
// naming table and column when a value does not parse.
Status TupleToRow(const ColumnMapping& mapping, const Tuple& tuple, const Tuple* old_tuple,
                  std::vector<definitions::Value>* row);

}  // namespace tally::postgres
