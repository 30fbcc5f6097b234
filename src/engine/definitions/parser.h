// The parser of the definition language. The grammar (keywords case-insensitive,
// identifiers folded to lower case unless "quoted", as in PostgreSQL):
//
//   script     := [ statement ( ';' statement )* [ ';' ] ]
//   statement  := CREATE COUNTER name AS select | DROP COUNTER name | SHOW COUNTERS
//               | CREATE SOURCE name ( column ( ',' column )* ) | DROP SOURCE name
//               | SHOW SOURCES
//   column     := name type [ NOT NULL | NULL | PRIMARY KEY ]...   (constraints ignored)
//   type       := word... [ ( integer, ... ) ] word...   e.g. varchar(20),
//                 timestamp(3) with time zone; the compiler checks the name (compiler.h)
//   select     := SELECT item ( ',' item )* FROM source [ WHERE expr ]
//                 [ GROUP BY expr ( ',' expr )* ] [ WITH ( option ( ',' option )* ) ]
//   option     := name = 'text'          e.g. retention = '30 days' (see compiler.h)
//   item       := expr [ [ AS ] alias ]
//   expr       := expr OR expr | expr AND expr | NOT expr
//               | expr IS [ NOT ] NULL
//               | expr ( = | <> | != | < | <= | > | >= ) expr
//               | expr [ NOT ] BETWEEN expr AND expr | expr [ NOT ] IN ( expr, ... )
//               | expr ( + | - ) expr | expr ( * | / | % ) expr | - expr
//               | CASE [ expr ] WHEN expr THEN expr ... [ ELSE expr ] END
//               | name ( [ * | [ DISTINCT ] expr, ... ] ) | [ source . ] column | literal
//               | ( expr )
//   literal    := integer | decimal | 'text' | TRUE | FALSE | NULL   (decimal: 9.99, no exponent)
//
// Precedence, lowest first, is PostgreSQL's: OR, AND, NOT, IS, comparisons, BETWEEN/IN,
// + -, * / %, unary minus. Comparisons do not associate (a < b < c is an error).
// Constructs of SQL outside the subset (joins, subqueries, SELECT DISTINCT, HAVING, ORDER BY,
// LIMIT, window functions, casts, ...) are recognised and refused with a precise error,
// "line L, column C: ...", rather than a bare syntax error.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/ast.h"

namespace tally::definitions {

// Parses a script of zero or more statements separated by ';'.
Result<std::vector<Statement>> ParseScript(std::string_view sql);

// Parses exactly one statement, with an optional trailing ';'.
Result<Statement> ParseStatement(std::string_view sql);

}  // namespace tally::definitions
