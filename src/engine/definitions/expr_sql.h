// What the compiler asks of expressions beyond emitting them: which function names are
// aggregates, what kind each call is and which arguments it takes, structural equality, the SQL
// text of an expression (what `tally verify` runs in PostgreSQL), and the static types of
// expressions with their rules for numerics.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/definitions/ast.h"
#include "engine/definitions/program.h"
#include "engine/definitions/value.h"

namespace tally::definitions {

// count, sum, min, max, avg: the aggregates a counter keeps.
bool IsSupportedAggregate(std::string_view name);
// Aggregates of PostgreSQL that a counter cannot keep with the formula.
bool IsOtherAggregate(std::string_view name);
bool IsWindowFunction(std::string_view name);
// A call of a supported aggregate.
bool IsAggregateCall(const Expr& expr);
// The first call of an aggregate (supported or not) inside `expr`, itself included.
const Expr* FindAggregate(const Expr& expr);
// The error for a call of an aggregate a counter cannot keep.
tl::unexpected<Error> UnsupportedAggregate(const Expr& call);
// The kind of aggregate `call` (a supported aggregate's call), or why it is refused.
Result<Aggregate> AggregateKindOf(const Expr& call);
// How a counter of these aggregates keeps its groups (program.h). REQUIRES: not empty.
Layout LayoutOf(std::span<const AggregateColumn> aggregates);
// Structural equality, ignoring positions and qualifiers (the qualifier can only name the
// source, which the compiler checks).
bool SameExpr(const Expr& a, const Expr& b);
// The expression as PostgreSQL reads it, fully parenthesised.
std::string ToSql(const Expr& expr);

// The static type of an expression: its Type and, for a numeric, its scale (the scale of
// its values: a column's, a literal's, or what + - * make of their operands').
struct ExprType {
  Type type = Type::kNull;
  int scale = 0;
  ExprType(Type t = Type::kNull, int s = 0) : type(t), scale(s) {}  // NOLINT: a Type is one
  operator Type() const { return type; }                            // NOLINT
};

bool IsNumber(Type type);
bool IsNumberOrNull(Type type);
// Two types are compatible when equal or when either is the NULL literal's.
bool Compatible(Type a, Type b);
// Values of these types may be compared, and be branches of one CASE or coalesce:
// compatible types, or int64 and numeric (compared exactly, an int64 as a numeric of scale
// 0), as PostgreSQL does.
bool Comparable(Type a, Type b);
// The type of two comparable branches: a numeric of the larger scale when one is numeric.
ExprType Unify(ExprType a, ExprType b);

// Checks the argument type of aggregate `call` of `kind`: sum and avg take int64 or
// numeric, min and max also timestamp, count anything (count(DISTINCT x) no float).
Status CheckAggregateArgument(const Expr& call, Aggregate kind, ExprType type);

}  // namespace tally::definitions
