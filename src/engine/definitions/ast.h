// The syntax tree of the definition language, as the parser builds it: untyped, names not
// yet resolved. The compiler checks and lowers it (compiler.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/definitions/lexer.h"

namespace tally::definitions {

// The kinds of expression nodes.
enum class ExprKind : uint8_t {
  kColumn,   // name (qualifier optional)
  kInteger,  // int_value
  kDecimal,  // text: digits with a '.', a numeric literal ("9.99")
  kString,   // text
  kBool,     // int_value 0 or 1
  kNull,
  kUnary,     // op ("-", "NOT") args[0]
  kBinary,    // op ("+", "AND", "=", ...) args[0] args[1]
  kIsNull,    // args[0] IS [NOT] NULL; negated for IS NOT NULL
  kIn,        // args[0] [NOT] IN (args[1..])
  kBetween,   // args[0] [NOT] BETWEEN args[1] AND args[2]
  kCase,      // CASE [args[0] if has_operand] WHEN c THEN r ... [ELSE e] END:
              // args = [operand] c1 r1 c2 r2 ... [else]; has_else tells
  kFunction,  // name(args) or name(*) when star
};

// One expression node. A plain tagged struct rather than a class hierarchy: the tree is
// small, built once and walked a few times by the compiler.
struct Expr {
  ExprKind kind = ExprKind::kNull;
  Position pos;              // where the node starts (the operator for binary nodes)
  std::string op;            // kUnary, kBinary
  std::string name;          // kColumn, kFunction (lower case)
  std::string qualifier;     // kColumn: "posts" in posts.user_id, else empty
  std::string text;          // kString, kDecimal
  int64_t int_value = 0;     // kInteger, kBool
  bool negated = false;      // kIsNull, kIn, kBetween
  bool star = false;         // kFunction: count(*)
  bool distinct = false;     // kFunction: count(DISTINCT x)
  bool has_operand = false;  // kCase: simple CASE x WHEN ...
  bool has_else = false;     // kCase
  int depth = 1;             // the height of the tree below this node, itself included
  std::vector<std::unique_ptr<Expr>> args;
};

using ExprPtr = std::unique_ptr<Expr>;

// One item of the select list: an expression and its alias (empty when none).
struct SelectItem {
  ExprPtr expr;
  std::string alias;
  Position pos;
};

// One option of WITH ( name = 'value', ... ): not yet checked (the compiler knows the names).
struct CounterOption {
  std::string name;   // lower case unless quoted
  std::string value;  // the text of the string literal
  Position pos;       // of the name
  Position value_pos;
};

// CREATE COUNTER name AS SELECT items FROM source [WHERE where] [GROUP BY group_by]
// [WITH ( options )].
struct CreateCounter {
  std::string name;
  Position name_pos;
  std::vector<SelectItem> items;
  std::string source;
  Position source_pos;
  ExprPtr where;  // null when absent
  std::vector<ExprPtr> group_by;
  bool has_group_by = false;
  std::vector<CounterOption> options;
  Position with_pos;  // of WITH, when there are options
};

// DROP COUNTER name.
struct DropCounter {
  std::string name;
  Position name_pos;
};

// SHOW COUNTERS.
struct ShowCounters {};

// CREATE SOURCE name ( column type [ constraint ... ], ... ): a source's schema. The types
// are PostgreSQL's spellings, not yet checked (the compiler maps them to tally types).
struct CreateSource {
  struct Column {
    std::string name;
    std::string type_name;           // the type's words, lower case: "character varying"
    std::vector<int64_t> type_args;  // the numbers in parentheses: varchar(20), timestamp(3)
    Position pos;                    // of the name
    Position type_pos;               // of the type's first word
  };
  std::string name;
  Position name_pos;
  std::vector<Column> columns;
};

// DROP SOURCE name.
struct DropSource {
  std::string name;
  Position name_pos;
};

// SHOW SOURCES.
struct ShowSources {};

// One statement of a definitions script.
using Statement =
    std::variant<CreateCounter, DropCounter, ShowCounters, CreateSource, DropSource, ShowSources>;

}  // namespace tally::definitions
