// The compiler of CREATE COUNTER: checks a parsed definition against its source's schema
// (names, types, the shape of an aggregate query) and lowers it to a CompiledCounter.
//
// What is accepted must mean the same in PostgreSQL, so that running the counter's
// SELECT there gives tally's values; where PostgreSQL would coerce implicitly (a text
// literal compared with an int64, say) the definition is refused instead. Rules:
//   - the key columns, then one or more aggregates, each standing alone as a select item:
//     count(*), count(x), count(DISTINCT x) (x not a float), sum(x) and avg(x) of an int64
//     or numeric x, min(x) and max(x) of an int64, numeric or timestamp x; sum, avg, min
//     and max of a float are refused as not exact; with several aggregates their names
//     (aliases, else the function's name) must differ; none in WHERE or GROUP BY, none
//     nested;
//   - every other select item appears in GROUP BY (as the same expression or by its
//     alias) and every GROUP BY item appears in the select list; a GROUP BY name means a
//     source column first and an alias only when no column has that name (PostgreSQL's
//     rule); the key is the select items in select-list order;
//   - WHERE is a boolean; operands of + - * / % are int64, of + - * also numeric (at
//     PostgreSQL's scales; / and % of a numeric are refused), of AND OR NOT bool; compared
//     values have the same type or are int64 and numeric; floats are never compared; CASE
//     and coalesce branches share a type; a key column is not numeric or float;
//   - date_trunc's unit is a literal 'minute', 'hour', 'day', 'week' or 'month';
//   - WITH ( retention = '<n> <unit>' ), the one option: n from 1 to 1,000,000, unit minute,
//     hour, day, week or month (singular or plural); the counter must have exactly one time
//     bucket, a key column that is a date_trunc(...) select item (time_util.h has the rule).
// Every error reads "line L, column C: ...", pointing at the offending construct.
#pragma once

#include <functional>
#include <string_view>

#include "core/status.h"
#include "engine/definitions/ast.h"
#include "engine/definitions/program.h"

namespace tally::definitions {

// Finds a source's schema by name; nullptr when there is no such source.
using Catalog = std::function<const SourceSchema*(std::string_view source)>;

// Checks and compiles one definition. Its create_sql() (what the catalog keeps) always reads
// back: a definition whose normal form would nest past the parser's limit is refused.
Result<CompiledCounter> Compile(const CreateCounter& create, const Catalog& catalog);

// Parses and compiles one CREATE COUNTER statement. kInvalidArgument for any other
// statement.
Result<CompiledCounter> CompileSql(std::string_view sql, const Catalog& catalog);

// Checks a CREATE SOURCE and returns its schema. A column's type is one of PostgreSQL's
// spellings, mapped to a tally type:
//   bigint int8 integer int int4 smallint int2                        -> int64
//   boolean bool                                                      -> bool
//   text, varchar[(n)], character varying[(n)]                        -> text
//   timestamp[(p)] [without time zone], timestamptz[(p)],
//   timestamp[(p)] with time zone                                     -> timestamp
//   numeric(p[,s]) decimal(p[,s]), s from 0 to 18                     -> numeric (scale s)
//   real float4 double precision float8 float[(p)]                    -> float
// (a bare numeric, without a scale, is refused: its sums would have no scale; a varchar's
// length is not enforced: the source database does that). Refused: any other
// type, a duplicate column, more than 1600 columns (PostgreSQL's limit), and a ':' or '\'
// in the source's or a column's name. Errors read "line L, column C: ...".
Result<SourceSchema> CompileSource(const CreateSource& create);

// The normalised CREATE SOURCE of a schema, one type name per tally type (bigint, boolean,
// text, timestamp, numeric(p,s), double precision), names quoted where PostgreSQL needs it:
//   CREATE SOURCE posts (id bigint, title text, created_at timestamp, is_published boolean)
// CompileSource of its parse gives the schema back.
std::string SourceSql(const SourceSchema& schema);

}  // namespace tally::definitions
