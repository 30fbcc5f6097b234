#include "engine/definitions/expr_sql.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/definitions/lexer.h"

namespace tally::definitions {

bool IsSupportedAggregate(std::string_view name) {
  return name == "count" || name == "sum" || name == "min" || name == "max" || name == "avg";
}

// Aggregates of PostgreSQL that a counter cannot keep with the formula.
bool IsOtherAggregate(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "bool_and",  "bool_or", "every",    "string_agg", "array_agg",       "json_agg",
      "jsonb_agg", "stddev",  "variance", "bit_and",    "bit_or",          "count_if",
      "any_value", "median",  "sum_if",   "mode",       "percentile_cont", "percentile_disc"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

bool IsWindowFunction(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "row_number", "rank", "dense_rank",  "percent_rank", "cume_dist", "ntile",
      "lag",        "lead", "first_value", "last_value",   "nth_value"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

bool IsAggregateCall(const Expr& expr) {
  return expr.kind == ExprKind::kFunction && IsSupportedAggregate(expr.name);
}

// The first call of an aggregate (supported or not) inside `expr`, itself included.
const Expr* FindAggregate(const Expr& expr) {
  if (expr.kind == ExprKind::kFunction &&
      (IsSupportedAggregate(expr.name) || IsOtherAggregate(expr.name))) {
    return &expr;
  }
  for (const ExprPtr& arg : expr.args) {
    if (const Expr* found = FindAggregate(*arg)) return found;
  }
  return nullptr;
}

// Structural equality, ignoring positions and qualifiers (the qualifier can only name the
// source, which the compiler checks).
bool SameExpr(const Expr& a, const Expr& b) {
  if (a.kind != b.kind || a.op != b.op || a.name != b.name || a.text != b.text ||
      a.int_value != b.int_value || a.negated != b.negated || a.star != b.star ||
      a.distinct != b.distinct || a.has_operand != b.has_operand || a.has_else != b.has_else ||
      a.args.size() != b.args.size()) {
    return false;
  }
  for (size_t i = 0; i < a.args.size(); ++i) {
    if (!SameExpr(*a.args[i], *b.args[i])) return false;
  }
  return true;
}

// The expression as PostgreSQL SQL, fully parenthesised, columns unqualified.
std::string ToSql(const Expr& expr) {
  switch (expr.kind) {
    case ExprKind::kColumn:
      return QuoteIdentifier(expr.name);
    case ExprKind::kInteger:
      return fmt::format("{}", expr.int_value);
    case ExprKind::kDecimal:
      return expr.text;
    case ExprKind::kString:
      return DebugString(Value::Text(expr.text));
    case ExprKind::kBool:
      return expr.int_value != 0 ? "true" : "false";
    case ExprKind::kNull:
      return "NULL";
    case ExprKind::kUnary:
      if (expr.op == "NOT") {
        // A chain NOT NOT ... x in one pair of parentheses: one pair per NOT would make the
        // normalised spelling nest twice as deep as the original, past the parser's limit.
        std::string out = "(NOT ";
        const Expr* operand = expr.args[0].get();
        for (; operand->kind == ExprKind::kUnary && operand->op == "NOT";
             operand = operand->args[0].get()) {
          out += "NOT ";
        }
        return out + ToSql(*operand) + ")";
      }
      // "- 5" would parse back as the literal -5: minus of a literal keeps its parentheses.
      if (expr.args[0]->kind == ExprKind::kInteger) {
        return fmt::format("(- ({}))", ToSql(*expr.args[0]));
      }
      return fmt::format("(- {})", ToSql(*expr.args[0]));
    case ExprKind::kBinary:
      return fmt::format("({} {} {})", ToSql(*expr.args[0]), expr.op, ToSql(*expr.args[1]));
    case ExprKind::kIsNull:
      return fmt::format("({} IS {}NULL)", ToSql(*expr.args[0]), expr.negated ? "NOT " : "");
    case ExprKind::kIn: {
      std::string out = fmt::format("({} {}IN (", ToSql(*expr.args[0]), expr.negated ? "NOT " : "");
      for (size_t i = 1; i < expr.args.size(); ++i) {
        if (i > 1) out += ", ";
        out += ToSql(*expr.args[i]);
      }
      return out + "))";
    }
    case ExprKind::kBetween:
      return fmt::format("({} {}BETWEEN {} AND {})", ToSql(*expr.args[0]),
                         expr.negated ? "NOT " : "", ToSql(*expr.args[1]), ToSql(*expr.args[2]));
    case ExprKind::kCase: {
      std::string out = "CASE";
      size_t i = 0;
      if (expr.has_operand) out += " " + ToSql(*expr.args[i++]);
      const size_t end = expr.args.size() - (expr.has_else ? 1 : 0);
      for (; i < end; i += 2) {
        out += fmt::format(" WHEN {} THEN {}", ToSql(*expr.args[i]), ToSql(*expr.args[i + 1]));
      }
      if (expr.has_else) out += " ELSE " + ToSql(*expr.args.back());
      return out + " END";
    }
    case ExprKind::kFunction: {
      if (expr.star) return expr.name + "(*)";
      std::string out = expr.name + (expr.distinct ? "(DISTINCT " : "(");
      for (size_t i = 0; i < expr.args.size(); ++i) {
        if (i > 0) out += ", ";
        out += ToSql(*expr.args[i]);
      }
      return out + ")";
    }
  }
  return "?";
}

bool IsNumber(Type type) { return type == Type::kInt64 || type == Type::kNumeric; }
bool IsNumberOrNull(Type type) { return IsNumber(type) || type == Type::kNull; }

// Two types are compatible when equal or when either is the NULL literal's.
bool Compatible(Type a, Type b) { return a == b || a == Type::kNull || b == Type::kNull; }
// Values of these types may be compared, and be branches of one CASE or coalesce:
// compatible types, or int64 and numeric (compared exactly, an int64 as a numeric of scale
// 0), as PostgreSQL does.
bool Comparable(Type a, Type b) { return Compatible(a, b) || (IsNumber(a) && IsNumber(b)); }
// The type of two comparable branches: a numeric of the larger scale when one is numeric.
ExprType Unify(ExprType a, ExprType b) {
  if (a.type == Type::kNull) return b;
  if (b.type == Type::kNull) return a;
  if (a.type == Type::kNumeric || b.type == Type::kNumeric) {
    return ExprType(Type::kNumeric, std::max(a.scale, b.scale));
  }
  return a;
}

// ---- Aggregates ---------------------------------------------------------------------------

tl::unexpected<Error> UnsupportedAggregate(const Expr& call) {
  return ErrorAt(call.pos, fmt::format("aggregate function {} is not supported: a counter "
                                       "keeps count(*), count(x), count(DISTINCT x), sum(x), "
                                       "min(x), max(x) and avg(x)",
                                       call.name));
}

Result<Aggregate> AggregateKindOf(const Expr& call) {
  if (call.star) {
    if (call.name != "count") {
      return ErrorAt(call.pos, fmt::format("{}(*) is not supported; only count(*)", call.name));
    }
    return Aggregate::kCountStar;
  }
  if (call.args.size() != 1) {
    return ErrorAt(call.pos, fmt::format("{} takes exactly one argument, got {}", call.name,
                                         call.args.size()));
  }
  if (call.name == "count") return call.distinct ? Aggregate::kCountDistinct : Aggregate::kCount;
  if (call.name == "sum") return Aggregate::kSum;
  if (call.name == "min") return Aggregate::kMin;
  if (call.name == "max") return Aggregate::kMax;
  return Aggregate::kAvg;
}

Layout LayoutOf(std::span<const AggregateColumn> aggregates) {
  if (aggregates.size() != 1) return Layout::kComposite;
  switch (aggregates.front().kind) {
    case Aggregate::kCountStar:
    case Aggregate::kCount:
    case Aggregate::kSum:
      return Layout::kPlain;
    case Aggregate::kCountDistinct:
      return Layout::kDistinct;
    default:
      return Layout::kComposite;
  }
}

Status CheckAggregateArgument(const Expr& call, Aggregate kind, ExprType type) {
  const Position pos = call.args[0]->pos;
  const std::string what = kind == Aggregate::kCountDistinct ? "count(DISTINCT ...)" : call.name;
  if (kind == Aggregate::kCount || type.type == Type::kNull) return OkStatus();
  if (type.type == Type::kFloat) {
    return ErrorAt(pos, fmt::format("{} over a float is not exact: tally keeps exact values "
                                    "only; declare the column numeric(p,s) or an integer type",
                                    what));
  }
  switch (kind) {
    case Aggregate::kSum:
    case Aggregate::kAvg:
      if (IsNumber(type)) return OkStatus();
      return ErrorAt(
          pos, fmt::format("{} needs an int64 or numeric argument, not {}", what, TypeName(type)));
    case Aggregate::kMin:
    case Aggregate::kMax:
      if (IsNumber(type) || type.type == Type::kTimestamp) return OkStatus();
      return ErrorAt(pos, fmt::format("{} needs an int64, numeric or timestamp argument, not {}",
                                      what, TypeName(type)));
    default:
      return OkStatus();
  }
}

}  // namespace tally::definitions
