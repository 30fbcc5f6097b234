// The compiler of CREATE COUNTER: checks a parsed definition against its source's schema
// (names, types, the shape of an aggregate query) and lowers it to a CompiledCounter.
//
// What is accepted must mean the same in PostgreSQL, so that running the counter's
// SELECT there gives tally's values; where PostgreSQL would coerce implicitly (a text
// literal compared with an int64, say) the definition is refused instead. Rules:
//   - exactly one aggregate, count(*), count(expr) or sum(int64 expr), standing alone as
//     the last select item; none in WHERE or GROUP BY, none nested;
//   - every other select item appears in GROUP BY (as the same expression or by its
//     alias) and every GROUP BY item appears in the select list; a GROUP BY name means a
//     source column first and an alias only when no column has that name (PostgreSQL's
//     rule); the key is the select items in select-list order;
//   - WHERE is a boolean; operands of + - * / % are int64, of AND OR NOT bool; compared
//     values have the same type; CASE and coalesce branches share a type;
//   - date_trunc's unit is a literal 'minute', 'hour', 'day', 'week' or 'month'.
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

// Checks and compiles one definition.
Result<CompiledCounter> Compile(const CreateCounter& create, const Catalog& catalog);

// Parses and compiles one CREATE COUNTER statement. kInvalidArgument for any other
// statement.
Result<CompiledCounter> CompileSql(std::string_view sql, const Catalog& catalog);

}  // namespace tally::definitions
