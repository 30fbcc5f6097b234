#include "engine/definitions/compiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/timestamp.h"
#include "engine/definitions/expr_sql.h"
#include "engine/definitions/numeric.h"
#include "engine/definitions/parser.h"

namespace tally::definitions {

namespace {

// Why a float cannot be compared (PostgreSQL could; tally keeps to exact values).
constexpr std::string_view kFloatNotExact =
    "floating point is not exact: declare the column numeric(p,s) or an integer type";

}  // namespace

// Checks one definition and emits its program. One instance per compilation.
class Compiler {
 public:
  Compiler(const CreateCounter& create, const SourceSchema& source)
      : create_(create), source_(source) {}

  Result<CompiledCounter> Run() {
    if (create_.name.find_first_of(":\\") != std::string::npos) {
      return ErrorAt(create_.name_pos,
                     "a counter name cannot contain ':' or '\\': they "
                     "separate and escape the parts of a counter key");
    }
    out_.name_ = create_.name;
    out_.source_ = source_;
    if (auto s = CheckShape(); !s) return tl::unexpected(s.error());

    // WHERE first: PostgreSQL computes the keys of passing rows only.
    if (create_.where) {
      auto type = Emit(*create_.where);
      if (!type) return tl::unexpected(type.error());
      if (!Compatible(*type, Type::kBool)) {
        return ErrorAt(create_.where->pos,
                       fmt::format("WHERE must be a bool condition, not {}", TypeName(*type)));
      }
      Add(Op::kFilter);
      out_.filter_sql_ = ToSql(*create_.where);
    }
    const size_t key_count = key_count_;
    for (size_t i = 0; i < key_count; ++i) {
      const SelectItem& item = create_.items[i];
      auto type = Emit(*item.expr);
      if (!type) return tl::unexpected(type.error());
      if (type->type == Type::kNumeric || type->type == Type::kFloat) {
        return ErrorAt(item.pos, fmt::format("a key column cannot be {}: group by an integer, "
                                             "bool, text or timestamp",
                                             TypeName(*type)));
      }
      Add(Op::kKey, static_cast<int32_t>(i));
      std::string name = item.alias;
      if (name.empty()) {
        name = item.expr->kind == ExprKind::kColumn ? item.expr->name : fmt::format("key{}", i);
      }
      out_.key_columns_.push_back(KeyColumn{name, *type, ToSql(*item.expr)});
    }
    if (auto s = EmitAggregates(); !s) return tl::unexpected(s.error());
    if (auto s = CheckOptions(); !s) return tl::unexpected(s.error());

    // The normalised SELECT: what `tally verify` runs against the source database.
    std::string select;
    std::string group_by;
    for (size_t i = 0; i < key_count; ++i) {
      const SelectItem& item = create_.items[i];
      select += ToSql(*item.expr);
      if (!item.alias.empty()) select += " AS " + QuoteIdentifier(item.alias);
      select += ", ";
      group_by += (i > 0 ? ", " : "") + GroupBySql(item);
    }
    out_.sql_ =
        fmt::format("SELECT {}{} FROM {}", select, out_.value_sql_, QuoteIdentifier(source_.name));
    if (create_.where) out_.sql_ += " WHERE " + out_.filter_sql_;
    if (key_count > 0) out_.sql_ += " GROUP BY " + group_by;

    // Text constants view strings that no longer move (see CompiledCounter's move note).
    for (Value& constant : out_.constants_) {
      if (constant.type == Type::kText) {
        constant.s = out_.constant_text_[static_cast<size_t>(constant.i)];
        constant.i = 0;
      }
    }
    std::sort(out_.columns_used_.begin(), out_.columns_used_.end());
    out_.columns_used_.erase(std::unique(out_.columns_used_.begin(), out_.columns_used_.end()),
                             out_.columns_used_.end());
    int32_t pushes = 0;
    for (const Instr& instr : out_.code_) {
      if (instr.op == Op::kColumn || instr.op == Op::kConst || instr.op == Op::kLoadTemp) {
        ++pushes;
      }
    }
    // Jumps only go forward, so each push runs at most once: a bound on the depth.
    out_.max_stack_ = pushes;
    return std::move(out_);
  }

 private:
  // The aggregate query's shape: the key columns, then one or more aggregates; GROUP BY
  // and the key columns agree. Sets key_count_.
  Status CheckShape() {
    const SelectItem* aggregate = nullptr;  // the first
    for (const SelectItem& item : create_.items) {
      if (IsAggregateCall(*item.expr)) {
        if (aggregate == nullptr) {
          aggregate = &item;
          key_count_ = static_cast<size_t>(&item - create_.items.data());
        }
        for (const ExprPtr& arg : item.expr->args) {
          if (const Expr* inner = FindAggregate(*arg)) {
            return ErrorAt(inner->pos, "aggregate function calls cannot be nested");
          }
        }
      } else if (const Expr* inner = FindAggregate(*item.expr)) {
        if (!IsSupportedAggregate(inner->name)) return UnsupportedAggregate(*inner);
        return ErrorAt(inner->pos,
                       "an aggregate must be a select item of its own, not part of an "
                       "expression");
      }
    }
    if (aggregate == nullptr) {
      return ErrorAt(create_.items.front().pos,
                     "a counter needs an aggregate after its key columns: count(*), count(x), "
                     "count(DISTINCT x), sum(x), min(x), max(x) or avg(x)");
    }
    for (size_t i = key_count_; i < create_.items.size(); ++i) {
      if (!IsAggregateCall(*create_.items[i].expr)) {
        return ErrorAt(create_.items[i].pos,
                       fmt::format("key column {} must come before the aggregates",
                                   ToSql(*create_.items[i].expr)));
      }
    }
    if (create_.where) {
      if (const Expr* inner = FindAggregate(*create_.where)) {
        return ErrorAt(inner->pos, "aggregate functions are not allowed in WHERE");
      }
    }

    // Resolve each GROUP BY item to the select item it names.
    const size_t key_count = key_count_;
    std::vector<bool> item_grouped(key_count, false);
    std::vector<const Expr*> unmatched;
    for (const ExprPtr& group : create_.group_by) {
      if (const Expr* inner = FindAggregate(*group)) {
        return ErrorAt(inner->pos, "aggregate functions are not allowed in GROUP BY");
      }
      if (group->kind == ExprKind::kInteger) {
        return ErrorAt(group->pos,
                       "GROUP BY position is not supported: name the expression or its alias");
      }
      if (group->kind == ExprKind::kString || group->kind == ExprKind::kBool ||
          group->kind == ExprKind::kNull) {
        return ErrorAt(group->pos, "a constant in GROUP BY is not supported");
      }
      if (auto s = CheckNamesOrAlias(*group); !s) return s;
      std::optional<size_t> match;
      // A bare name is a source column if there is one, else a select alias.
      if (group->kind == ExprKind::kColumn && group->qualifier.empty() &&
          FindColumn(group->name) < 0) {
        for (size_t i = 0; i < create_.items.size(); ++i) {
          if (create_.items[i].alias == group->name) {
            if (i >= key_count) {
              return ErrorAt(group->pos, "aggregate functions are not allowed in GROUP BY");
            }
            match = i;
            break;
          }
        }
      }
      for (size_t i = 0; i < key_count && !match; ++i) {
        if (SameExpr(*group, *create_.items[i].expr)) match = i;
      }
      if (match) {
        item_grouped[*match] = true;
      } else {
        unmatched.push_back(group.get());
      }
    }
    // As PostgreSQL, report a select item missing from GROUP BY first.
    for (size_t i = 0; i < key_count; ++i) {
      if (!item_grouped[i]) {
        const SelectItem& item = create_.items[i];
        if (auto s = CheckNames(*item.expr); !s) return s;
        return ErrorAt(item.pos,
                       fmt::format("select item {} must appear in GROUP BY", ToSql(*item.expr)));
      }
    }
    if (!unmatched.empty()) {
      return ErrorAt(unmatched.front()->pos,
                     fmt::format("GROUP BY item {} must also be a select item: the key of a "
                                 "counter is its select list",
                                 ToSql(*unmatched.front())));
    }
    return OkStatus();
  }

  // The key columns that are time buckets: select items date_trunc(unit, ...). The unit
  // is checked by then (Emit).
  std::vector<TimeBucket> TimeBuckets() const {
    std::vector<TimeBucket> buckets;
    for (size_t i = 0; i + 1 < create_.items.size(); ++i) {
      const Expr& expr = *create_.items[i].expr;
      if (expr.kind != ExprKind::kFunction || expr.name != "date_trunc") continue;
      if (auto unit = ParseTimeUnit(expr.args[0]->text)) buckets.push_back({i, *unit});
    }
    return buckets;
  }

  // WITH ( ... ): the one option is retention = '<count> <unit>', which needs exactly one
  // time bucket to remove.
  Status CheckOptions() {
    const std::vector<TimeBucket> buckets = TimeBuckets();
    if (buckets.size() == 1) out_.time_bucket_ = buckets.front();
    for (const CounterOption& option : create_.options) {
      if (option.name != "retention") {
        return ErrorAt(option.pos, fmt::format("unknown option \"{}\": a counter takes "
                                               "retention = '<number> <unit>'",
                                               option.name));
      }
      if (out_.retention_) return ErrorAt(option.pos, "option retention is given twice");
      auto retention = ParseRetention(option.value);
      if (!retention) return ErrorAt(option.value_pos, retention.error().message);
      if (buckets.empty()) {
        return ErrorAt(option.pos,
                       "retention needs a time bucket: a date_trunc('<unit>', <timestamp>) "
                       "key column in GROUP BY");
      }
      if (buckets.size() > 1) {
        std::string names;
        for (const TimeBucket& bucket : buckets) {
          names += (names.empty() ? "" : ", ") + ToSql(*create_.items[bucket.column].expr);
        }
        return ErrorAt(option.pos,
                       fmt::format("retention needs exactly one time bucket; this counter has "
                                   "{}: {}",
                                   buckets.size(), names));
      }
      out_.retention_ = *retention;
    }
    return OkStatus();
  }

  // How the normalised SQL groups by a key item: by its expression, except a literal key
  // named by an alias that no source column shadows, which it groups by that alias. Written
  // as itself, a literal would read back as a GROUP BY position (`5`, `-5`: refused here, a
  // column number to PostgreSQL) or a constant (refused by both).
  std::string GroupBySql(const SelectItem& item) const {
    const Expr* literal = item.expr.get();
    if (literal->kind == ExprKind::kUnary && literal->op == "-") literal = literal->args[0].get();
    const bool is_literal = literal->kind == ExprKind::kInteger ||
                            literal->kind == ExprKind::kDecimal ||
                            literal->kind == ExprKind::kString ||
                            literal->kind == ExprKind::kBool || literal->kind == ExprKind::kNull;
    if (is_literal && !item.alias.empty() && FindColumn(item.alias) < 0) {
      return QuoteIdentifier(item.alias);
    }
    return ToSql(*item.expr);
  }

  // CheckNames for a GROUP BY item, where a bare name may also be a select alias.
  Status CheckNamesOrAlias(const Expr& group) {
    if (group.kind == ExprKind::kColumn && group.qualifier.empty()) {
      for (const SelectItem& item : create_.items) {
        if (item.alias == group.name) return OkStatus();
      }
    }
    return CheckNames(group);
  }

  // Fails on the first column of `expr` that the source lacks.
  Status CheckNames(const Expr& expr) {
    if (expr.kind == ExprKind::kColumn) {
      if (auto index = ResolveColumn(expr); !index) return tl::unexpected(index.error());
    }
    for (const ExprPtr& arg : expr.args) {
      if (auto s = CheckNames(*arg); !s) return s;
    }
    return OkStatus();
  }

  int32_t FindColumn(std::string_view name) const {
    for (size_t i = 0; i < source_.columns.size(); ++i) {
      if (source_.columns[i].name == name) return static_cast<int32_t>(i);
    }
    return -1;
  }

  Result<int32_t> ResolveColumn(const Expr& expr) const {
    if (!expr.qualifier.empty() && expr.qualifier != source_.name) {
      return ErrorAt(expr.pos,
                     fmt::format("missing FROM-clause entry for table \"{}\"", expr.qualifier));
    }
    const int32_t index = FindColumn(expr.name);
    if (index < 0) {
      return ErrorAt(expr.pos, fmt::format("column \"{}\" does not exist in source {}", expr.name,
                                           source_.name));
    }
    return index;
  }

  void Add(Op op, int32_t arg = 0) { out_.code_.push_back(Instr{op, arg}); }
  int32_t Here() const { return static_cast<int32_t>(out_.code_.size()); }
  void PatchTo(int32_t at, int32_t target) { out_.code_[static_cast<size_t>(at)].arg = target; }

  void AddConstant(Value value) {
    out_.constants_.push_back(value);
    Add(Op::kConst, static_cast<int32_t>(out_.constants_.size() - 1));
  }

  // The aggregates after the key columns: each one's kind, argument and name, the counter's
  // layout, and the code of their terms: a plain counter's value (value_one, value_count,
  // value_sum), or any other counter's arguments (argument i).
  Status EmitAggregates() {
    const size_t count = create_.items.size() - key_count_;
    for (size_t i = key_count_; i < create_.items.size(); ++i) {
      const SelectItem& item = create_.items[i];
      auto kind = AggregateKindOf(*item.expr);
      if (!kind) return tl::unexpected(kind.error());
      AggregateColumn column;
      column.kind = *kind;
      column.sql = ToSql(*item.expr);
      column.name = item.alias.empty() ? item.expr->name : item.alias;
      for (const AggregateColumn& before : out_.aggregates_) {
        if (count > 1 && before.name == column.name) {
          return ErrorAt(item.pos, fmt::format("two aggregates are named {}: name one with AS, "
                                               "the name its value is read by",
                                               column.name));
        }
      }
      out_.aggregates_.push_back(std::move(column));
    }
    out_.layout_ = LayoutOf(out_.aggregates_);
    const bool plain = out_.layout_ == Layout::kPlain;
    for (size_t i = 0; i < count; ++i) {
      AggregateColumn& column = out_.aggregates_[i];
      const SelectItem& item = create_.items[key_count_ + i];
      if (column.kind == Aggregate::kCountStar) {
        if (plain) Add(Op::kValueOne);
      } else {
        auto type = Emit(*item.expr->args[0]);
        if (!type) return tl::unexpected(type.error());
        if (auto s = CheckAggregateArgument(*item.expr, column.kind, *type); !s) return s;
        column.type = type->type;
        column.scale = type->type == Type::kNumeric ? type->scale : 0;
        column.argument_sql = ToSql(*item.expr->args[0]);
        if (!plain) {
          Add(Op::kArgument, static_cast<int32_t>(i));
        } else if (column.kind == Aggregate::kCount) {
          Add(Op::kValueCount);
        } else {
          Add(Op::kValueSum, column.scale);
        }
      }
      if (!out_.value_sql_.empty()) out_.value_sql_ += ", ";
      out_.value_sql_ += column.sql;
      // Names matter only with several aggregates (a read shows each by its name).
      if (count > 1 && !item.alias.empty()) out_.value_sql_ += " AS " + QuoteIdentifier(item.alias);
    }
    return OkStatus();
  }

  // Emits code leaving the value of `expr` on the stack; returns its type.
  Result<ExprType> Emit(const Expr& expr) {
    switch (expr.kind) {
      case ExprKind::kColumn: {
        auto index = ResolveColumn(expr);
        if (!index) return tl::unexpected(index.error());
        Add(Op::kColumn, *index);
        out_.columns_used_.push_back(*index);
        const SourceSchema::Column& column = source_.columns[static_cast<size_t>(*index)];
        return ExprType(column.type, column.scale);
      }
      case ExprKind::kInteger:
        AddConstant(Value::Int(expr.int_value));
        return Type::kInt64;
      case ExprKind::kDecimal:
        return EmitDecimal(expr);
      case ExprKind::kString:
        // `i` holds the index of the owned text until Run() fixes the views.
        out_.constant_text_.push_back(expr.text);
        AddConstant(
            Value{Type::kText, 0, static_cast<int64_t>(out_.constant_text_.size() - 1), {}});
        return Type::kText;
      case ExprKind::kBool:
        AddConstant(Value::Bool(expr.int_value != 0));
        return Type::kBool;
      case ExprKind::kNull:
        AddConstant(Value::Null());
        return Type::kNull;
      case ExprKind::kUnary:
        return EmitUnary(expr);
      case ExprKind::kBinary:
        return EmitBinary(expr);
      case ExprKind::kIsNull: {
        if (auto type = Emit(*expr.args[0]); !type) return type;
        Add(expr.negated ? Op::kIsNotNull : Op::kIsNull);
        return Type::kBool;
      }
      case ExprKind::kIn:
        return EmitIn(expr);
      case ExprKind::kBetween:
        return EmitBetween(expr);
      case ExprKind::kCase:
        return EmitCase(expr);
      case ExprKind::kFunction:
        return EmitFunction(expr);
    }
    return ErrorAt(expr.pos, "unknown expression");
  }

  Result<ExprType> EmitUnary(const Expr& expr) {
    auto type = Emit(*expr.args[0]);
    if (!type) return type;
    if (expr.op == "NOT") {
      if (!Compatible(*type, Type::kBool)) {
        return ErrorAt(expr.pos, fmt::format("NOT needs a bool operand, not {}", TypeName(*type)));
      }
      Add(Op::kNot);
      return Type::kBool;
    }
    if (!IsNumberOrNull(*type)) {
      return ErrorAt(expr.pos,
                     fmt::format("operator - needs an int64 operand, not {}", TypeName(*type)));
    }
    Add(Op::kNeg);
    return type->type == Type::kNumeric ? *type : ExprType(Type::kInt64);
  }

  // A numeric literal: its scale is its digits after the point, as PostgreSQL types it.
  Result<ExprType> EmitDecimal(const Expr& expr) {
    const size_t point = expr.text.find('.');
    const int scale = static_cast<int>(expr.text.size() - point - 1);
    if (scale > kMaxScale) {
      return ErrorAt(expr.pos, fmt::format("numeric literal {} has more than {} digits after the "
                                           "point",
                                           expr.text, kMaxScale));
    }
    auto units = ParseDecimal(expr.text, scale);
    if (!units) {
      return ErrorAt(expr.pos, fmt::format("numeric literal {} is out of range (at most 18 "
                                           "digits)",
                                           expr.text));
    }
    AddConstant(Value::Numeric(*units, scale));
    return ExprType(Type::kNumeric, scale);
  }

  // + - * / % with a numeric operand (the other int64, numeric or NULL): + and - keep the
  // larger scale, * adds the scales (PostgreSQL's rules); / and % are refused, their
  // result's scale being PostgreSQL's choice, not a column's.
  Result<ExprType> NumericArithmetic(const Expr& expr, Op code, ExprType left, ExprType right) {
    if (code == Op::kDiv || code == Op::kMod) {
      return ErrorAt(expr.pos, fmt::format("operator {} is not supported on numeric values: its "
                                           "result has no fixed scale",
                                           expr.op));
    }
    const int scale =
        code == Op::kMul ? left.scale + right.scale : std::max(left.scale, right.scale);
    if (scale > kMaxScale) {
      return ErrorAt(expr.pos, fmt::format("the product has {} digits after the point; a numeric "
                                           "keeps at most {}",
                                           scale, kMaxScale));
    }
    Add(code);
    return ExprType(Type::kNumeric, scale);
  }

  Result<ExprType> EmitBinary(const Expr& expr) {
    const std::string& op = expr.op;
    if (op == "AND" || op == "OR") {
      auto left = Emit(*expr.args[0]);
      if (!left) return left;
      const int32_t jump = Here();
      Add(op == "AND" ? Op::kJumpIfFalse : Op::kJumpIfTrue);
      auto right = Emit(*expr.args[1]);
      if (!right) return right;
      for (const Type type : {*left, *right}) {
        if (!Compatible(type, Type::kBool)) {
          return ErrorAt(expr.pos,
                         fmt::format("{} needs bool operands, not {}", op, TypeName(type)));
        }
      }
      Add(op == "AND" ? Op::kAnd : Op::kOr);
      PatchTo(jump, Here());
      return Type::kBool;
    }
    auto left = Emit(*expr.args[0]);
    if (!left) return left;
    auto right = Emit(*expr.args[1]);
    if (!right) return right;
    static constexpr std::pair<std::string_view, Op> kArithmetic[] = {
        {"+", Op::kAdd}, {"-", Op::kSub}, {"*", Op::kMul}, {"/", Op::kDiv}, {"%", Op::kMod}};
    for (const auto& [spelling, code] : kArithmetic) {
      if (op != spelling) continue;
      if ((left->type == Type::kNumeric || right->type == Type::kNumeric) &&
          IsNumberOrNull(*left) && IsNumberOrNull(*right)) {
        return NumericArithmetic(expr, code, *left, *right);
      }
      if (!Compatible(*left, Type::kInt64) || !Compatible(*right, Type::kInt64)) {
        return ErrorAt(expr.pos, fmt::format("operator {} needs int64 operands, not {} and {}", op,
                                             TypeName(*left), TypeName(*right)));
      }
      Add(code);
      return Type::kInt64;
    }
    static constexpr std::pair<std::string_view, Op> kComparisons[] = {
        {"=", Op::kEq},  {"<>", Op::kNe}, {"<", Op::kLt},
        {"<=", Op::kLe}, {">", Op::kGt},  {">=", Op::kGe}};
    for (const auto& [spelling, code] : kComparisons) {
      if (op != spelling) continue;
      if (auto s = CheckComparable(expr.pos, *left, *right); !s) return tl::unexpected(s.error());
      Add(code);
      return Type::kBool;
    }
    return ErrorAt(expr.pos, fmt::format("unknown operator {}", op));
  }

  // Fails unless values of types a and b may be compared: "cannot compare text with int64",
  // or why a float cannot be.
  static Status CheckComparable(Position pos, Type a, Type b) {
    if (a == Type::kFloat || b == Type::kFloat) {
      return ErrorAt(pos, fmt::format("cannot compare float values: {}", kFloatNotExact));
    }
    if (!Comparable(a, b)) {
      return ErrorAt(pos, fmt::format("cannot compare {} with {}", TypeName(a), TypeName(b)));
    }
    return OkStatus();
  }

  Result<ExprType> EmitIn(const Expr& expr) {
    auto left = Emit(*expr.args[0]);
    if (!left) return left;
    ExprType type = *left;
    if (type.type == Type::kFloat) {
      return ErrorAt(expr.args[0]->pos, fmt::format("IN needs exact values: {}", kFloatNotExact));
    }
    for (size_t i = 1; i < expr.args.size(); ++i) {
      auto item = Emit(*expr.args[i]);
      if (!item) return item;
      if (!Comparable(type, *item) || item->type == Type::kFloat) {
        return ErrorAt(expr.args[i]->pos, fmt::format("IN list item of type {} does not "
                                                      "match {}",
                                                      TypeName(*item), TypeName(type)));
      }
      type = Unify(type, *item);
    }
    Add(Op::kIn, static_cast<int32_t>(expr.args.size() - 1));
    if (expr.negated) Add(Op::kNot);
    return Type::kBool;
  }

  // a BETWEEN b AND c is PostgreSQL's (a >= b AND a <= c). `a` is computed once and kept
  // in a temporary: emitting it twice would make nested BETWEENs grow exponentially.
  Result<ExprType> EmitBetween(const Expr& expr) {
    const int32_t temp = out_.temp_count_++;
    std::optional<ExprType> type;
    auto check = [&](const Expr& arg, ExprType t) -> Status {
      if (t.type == Type::kFloat) {
        return ErrorAt(arg.pos, fmt::format("BETWEEN needs exact values: {}", kFloatNotExact));
      }
      if (type && !Comparable(*type, t)) {
        return ErrorAt(arg.pos, fmt::format("BETWEEN bound of type {} does not match {}",
                                            TypeName(t), TypeName(*type)));
      }
      type = type ? Unify(*type, t) : t;
      return OkStatus();
    };
    auto value = Emit(*expr.args[0]);
    if (!value) return value;
    if (value->type == Type::kFloat) {
      return ErrorAt(expr.args[0]->pos,
                     fmt::format("BETWEEN needs exact values: {}", kFloatNotExact));
    }
    type = *value;
    Add(Op::kStoreTemp, temp);
    auto low = Emit(*expr.args[1]);
    if (!low) return low;
    if (auto s = check(*expr.args[1], *low); !s) return tl::unexpected(s.error());
    Add(Op::kGe);
    const int32_t jump = Here();
    Add(Op::kJumpIfFalse);
    Add(Op::kLoadTemp, temp);
    auto high = Emit(*expr.args[2]);
    if (!high) return high;
    if (auto s = check(*expr.args[2], *high); !s) return tl::unexpected(s.error());
    Add(Op::kLe);
    Add(Op::kAnd);
    PatchTo(jump, Here());
    if (expr.negated) Add(Op::kNot);
    return Type::kBool;
  }

  Result<ExprType> EmitCase(const Expr& expr) {
    size_t i = 0;
    std::optional<ExprType> operand_type;
    const Expr* operand = nullptr;
    if (expr.has_operand) operand = expr.args[i++].get();
    const size_t end = expr.args.size() - (expr.has_else ? 1 : 0);
    std::optional<ExprType> result_type;
    std::vector<int32_t> to_end;
    auto check_result = [&](const Expr& result, ExprType type) -> Status {
      if (result_type && !Comparable(*result_type, type)) {
        return ErrorAt(result.pos, fmt::format("CASE branches have different types: {} and {}",
                                               TypeName(*result_type), TypeName(type)));
      }
      result_type = result_type ? Unify(*result_type, type) : type;
      return OkStatus();
    };
    // CASE x WHEN v is PostgreSQL's CASE WHEN x = v, x computed once into a temporary.
    int32_t temp = -1;
    if (operand != nullptr) {
      auto type = Emit(*operand);
      if (!type) return type;
      operand_type = *type;
      temp = out_.temp_count_++;
      Add(Op::kStoreTemp, temp);
      Add(Op::kPop);
    }
    for (; i < end; i += 2) {
      const Expr& when = *expr.args[i];
      if (operand != nullptr) {
        Add(Op::kLoadTemp, temp);
        auto right = Emit(when);
        if (!right) return right;
        if (auto s = CheckComparable(when.pos, *operand_type, *right); !s) {
          return tl::unexpected(s.error());
        }
        Add(Op::kEq);
      } else {
        auto type = Emit(when);
        if (!type) return type;
        if (!Compatible(*type, Type::kBool)) {
          return ErrorAt(
              when.pos, fmt::format("a CASE WHEN condition must be bool, not {}", TypeName(*type)));
        }
      }
      const int32_t skip = Here();
      Add(Op::kJumpIfNotTrue);
      const Expr& result = *expr.args[i + 1];
      auto type = Emit(result);
      if (!type) return type;
      if (auto s = check_result(result, *type); !s) return tl::unexpected(s.error());
      to_end.push_back(Here());
      Add(Op::kJump);
      PatchTo(skip, Here());
    }
    if (expr.has_else) {
      auto type = Emit(*expr.args.back());
      if (!type) return type;
      if (auto s = check_result(*expr.args.back(), *type); !s) return tl::unexpected(s.error());
    } else {
      AddConstant(Value::Null());
    }
    for (const int32_t at : to_end) PatchTo(at, Here());
    return result_type.value_or(Type::kNull);
  }

  Status CheckArity(const Expr& call, size_t count) {
    if (call.star) {
      return ErrorAt(call.pos, fmt::format("{}(*) is not supported; only count(*)", call.name));
    }
    if (call.args.size() == count) return OkStatus();
    return ErrorAt(call.pos, fmt::format("{} takes {} argument{}, got {}", call.name, count,
                                         count == 1 ? "" : "s", call.args.size()));
  }

  Result<ExprType> EmitFunction(const Expr& call) {
    const std::string& name = call.name;
    if (IsSupportedAggregate(name)) {
      // CheckShape lets no aggregate get here; kept as a guard.
      return ErrorAt(call.pos, "an aggregate must be a select item after the key columns");
    }
    if (IsOtherAggregate(name)) return UnsupportedAggregate(call);
    if (IsWindowFunction(name)) return ErrorAt(call.pos, "window functions are not supported");
    if (name == "lower" || name == "upper") {
      if (auto s = CheckArity(call, 1); !s) return tl::unexpected(s.error());
      auto type = Emit(*call.args[0]);
      if (!type) return type;
      if (!Compatible(*type, Type::kText)) {
        return ErrorAt(call.args[0]->pos,
                       fmt::format("{} needs a text argument, not {}", name, TypeName(*type)));
      }
      Add(name == "lower" ? Op::kLower : Op::kUpper);
      return Type::kText;
    }
    if (name == "coalesce") {
      if (call.star || call.args.empty()) {
        return ErrorAt(call.pos, "coalesce takes one or more arguments");
      }
      std::optional<ExprType> result;
      std::vector<int32_t> to_end;
      for (size_t i = 0; i < call.args.size(); ++i) {
        auto type = Emit(*call.args[i]);
        if (!type) return type;
        if (result && !Comparable(*result, *type)) {
          return ErrorAt(call.args[i]->pos,
                         fmt::format("coalesce arguments have different types: {} and {}",
                                     TypeName(*result), TypeName(*type)));
        }
        result = result ? Unify(*result, *type) : *type;
        if (i + 1 < call.args.size()) {
          to_end.push_back(Here());
          Add(Op::kJumpIfNotNull);
          Add(Op::kPop);
        }
      }
      for (const int32_t at : to_end) PatchTo(at, Here());
      return *result;
    }
    if (name == "date_trunc") {
      if (auto s = CheckArity(call, 2); !s) return tl::unexpected(s.error());
      const Expr& unit = *call.args[0];
      if (unit.kind != ExprKind::kString) {
        return ErrorAt(unit.pos, "the unit of date_trunc must be a text literal");
      }
      const std::optional<TimeUnit> found = ParseTimeUnit(unit.text);
      if (!found) {
        return ErrorAt(unit.pos, fmt::format("date_trunc unit '{}' is not supported: use "
                                             "'minute', 'hour', 'day', 'week' or 'month'",
                                             unit.text));
      }
      auto type = Emit(*call.args[1]);
      if (!type) return type;
      if (*type != Type::kTimestamp) {
        return ErrorAt(call.args[1]->pos,
                       fmt::format("date_trunc needs a timestamp, not {}", TypeName(*type)));
      }
      Add(Op::kDateTrunc, static_cast<int32_t>(*found));
      return Type::kTimestamp;
    }
    return ErrorAt(call.pos, fmt::format("function {} does not exist", name));
  }

  const CreateCounter& create_;
  const SourceSchema& source_;
  CompiledCounter out_;
  size_t key_count_ = 0;  // the select items before the first aggregate (CheckShape)
};

Result<CompiledCounter> Compile(const CreateCounter& create, const Catalog& catalog) {
  const SourceSchema* source = catalog(create.source);
  if (source == nullptr) {
    return ErrorAt(create.source_pos, fmt::format("source \"{}\" does not exist", create.source));
  }
  auto compiled = Compiler(create, *source).Run();
  if (!compiled) return compiled;
  // The catalog keeps create_sql() and compiles it at the next start: a definition whose
  // create_sql() does not compile again is refused here, with the reason, rather than kept
  // and then refused when the catalog is loaded (found by fuzz/sql_definitions_fuzz.cc). The
  // text is fully parenthesised and so can nest deeper than the one it came from (a pair of
  // parentheses per operator, two for a minus): that refusal points at the deepest
  // expression.
  const auto reason_of = [](const Error& error) {
    const size_t reason = error.message.find(": ");
    return reason == std::string::npos ? error.message : error.message.substr(reason + 2);
  };
  auto again = ParseStatement(compiled->create_sql());
  if (!again) {
    const Expr* deepest = create.where.get();
    for (const SelectItem& item : create.items) {
      if (deepest == nullptr || item.expr->depth > deepest->depth) deepest = item.expr.get();
    }
    return ErrorAt(deepest != nullptr ? deepest->pos : create.name_pos, reason_of(again.error()));
  }
  const auto* create_again = std::get_if<CreateCounter>(&*again);
  if (create_again == nullptr) {
    return ErrorAt(create.name_pos, "the definition's normalised text does not read back");
  }
  if (auto recompiled = Compiler(*create_again, *source).Run(); !recompiled) {
    return ErrorAt(create.name_pos, "the definition's normalised text does not compile again: " +
                                        reason_of(recompiled.error()));
  }
  return compiled;
}

std::string CompiledCounter::create_sql() const {
  std::string out = fmt::format("CREATE COUNTER {} AS {}", QuoteIdentifier(name_), sql_);
  if (retention_) out += fmt::format(" WITH (retention = '{}')", RetentionText(*retention_));
  return out;
}

std::optional<int64_t> CompiledCounter::BucketOfKey(std::string_view key) const {
  if (!time_bucket_) return std::nullopt;
  const std::optional<std::string_view> part = KeyPartText(key, time_bucket_->column);
  if (!part) return std::nullopt;
  const Result<int64_t> start = ParseTimestamp(*part);
  if (!start) return std::nullopt;
  return *start;
}

bool CompiledCounter::KeyExpired(std::string_view key, int64_t now_micros) const {
  if (!retention_) return false;
  const std::optional<int64_t> start = BucketOfKey(key);
  return start && Expired(*start, now_micros);
}

Result<CompiledCounter> CompileSql(std::string_view sql, const Catalog& catalog) {
  auto statement = ParseStatement(sql);
  if (!statement) return tl::unexpected(statement.error());
  const auto* create = std::get_if<CreateCounter>(&*statement);
  if (create == nullptr) return InvalidArgument("expected a CREATE COUNTER statement");
  return Compile(*create, catalog);
}

}  // namespace tally::definitions
