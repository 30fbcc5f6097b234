// The evaluator of compiled counters: one loop over the instruction array, a value stack
// in the caller's scratch. PostgreSQL's semantics for each opcode are noted where they
// are not obvious.
#include <fmt/format.h>

#include "engine/definitions/lexer.h"
#include "engine/definitions/numeric.h"
#include "engine/definitions/program.h"

namespace tally::definitions {

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kColumn:
      return "column";
    case Op::kConst:
      return "const";
    case Op::kNeg:
      return "neg";
    case Op::kAdd:
      return "add";
    case Op::kSub:
      return "sub";
    case Op::kMul:
      return "mul";
    case Op::kDiv:
      return "div";
    case Op::kMod:
      return "mod";
    case Op::kEq:
      return "eq";
    case Op::kNe:
      return "ne";
    case Op::kLt:
      return "lt";
    case Op::kLe:
      return "le";
    case Op::kGt:
      return "gt";
    case Op::kGe:
      return "ge";
    case Op::kNot:
      return "not";
    case Op::kAnd:
      return "and";
    case Op::kOr:
      return "or";
    case Op::kIsNull:
      return "is_null";
    case Op::kIsNotNull:
      return "is_not_null";
    case Op::kIn:
      return "in";
    case Op::kLower:
      return "lower";
    case Op::kUpper:
      return "upper";
    case Op::kDateTrunc:
      return "date_trunc";
    case Op::kJump:
      return "jump";
    case Op::kJumpIfFalse:
      return "jump_if_false";
    case Op::kJumpIfTrue:
      return "jump_if_true";
    case Op::kJumpIfNotTrue:
      return "jump_if_not_true";
    case Op::kJumpIfNotNull:
      return "jump_if_not_null";
    case Op::kPop:
      return "pop";
    case Op::kStoreTemp:
      return "store_temp";
    case Op::kLoadTemp:
      return "load_temp";
    case Op::kFilter:
      return "filter";
    case Op::kKey:
      return "key";
    case Op::kValueCount:
      return "value_count";
    case Op::kValueSum:
      return "value_sum";
    case Op::kValueOne:
      return "value_one";
    case Op::kArgument:
      return "argument";
  }
  return "?";
}

namespace {

// -1, 0 or 1 as a < b, a = b, a > b. REQUIRES: both non-NULL of the same type, or int64
// and numeric. Text compares bytewise, which is PostgreSQL's COLLATE "C" order for UTF-8;
// numerics of different scales (an int64 has scale 0) compare exactly.
int Compare(const Value& a, const Value& b) {
  if (a.type == Type::kText) {
    const int c = a.s.compare(b.s);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.scale != b.scale) return CompareUnits(a.i, a.scale, b.i, b.scale);
  return a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
}

bool IsTrue(const Value& v) { return v.type == Type::kBool && v.i != 0; }
bool IsFalse(const Value& v) { return v.type == Type::kBool && v.i == 0; }

tl::unexpected<Error> OutOfRange() {
  // PostgreSQL's own message for int8 overflow.
  return MakeError(ErrorCode::kOverflow, "bigint out of range");
}

tl::unexpected<Error> NumericOutOfRange() {
  return MakeError(ErrorCode::kOverflow,
                   "numeric value out of range (tally keeps at most 18 digits)");
}

// a <op> b for + - * when either is numeric (the other int64, scale 0), into a: + and -
// at the larger scale, * at the sum of the scales.
Status ApplyNumericArithmetic(Op op, Value& a, const Value& b) {
  int64_t r = 0;
  int scale = 0;
  if (op == Op::kMul) {
    scale = a.scale + b.scale;
    if (__builtin_mul_overflow(a.i, b.i, &r)) return NumericOutOfRange();
  } else {
    scale = std::max(a.scale, b.scale);
    const std::optional<int64_t> x = Rescale(a.i, a.scale, scale);
    const std::optional<int64_t> y = Rescale(b.i, b.scale, scale);
    if (!x || !y) return NumericOutOfRange();
    const bool overflow =
        op == Op::kAdd ? __builtin_add_overflow(*x, *y, &r) : __builtin_sub_overflow(*x, *y, &r);
    if (overflow) return NumericOutOfRange();
  }
  a = Value::Numeric(r, scale);
  return OkStatus();
}

// The one-operand instructions -a, NOT a, a IS [NOT] NULL and date_trunc(unit, a), in place.
Status ApplyUnary(const Instr& instr, Value& a) {
  switch (instr.op) {
    case Op::kIsNull:
      a = Value::Bool(a.is_null());
      return OkStatus();
    case Op::kIsNotNull:
      a = Value::Bool(!a.is_null());
      return OkStatus();
    default:
      break;
  }
  if (a.is_null()) return OkStatus();  // NULL in, NULL out
  switch (instr.op) {
    case Op::kNeg:
      if (a.i == INT64_MIN) return a.type == Type::kNumeric ? NumericOutOfRange() : OutOfRange();
      a.i = -a.i;
      break;
    case Op::kNot:
      a = Value::Bool(a.i == 0);
      break;
    default: {
      const auto truncated = TruncateTimestamp(static_cast<TimeUnit>(instr.arg), a.i);
      if (!truncated) return InvalidArgument("timestamp out of range");
      a = Value::Timestamp(*truncated);
      break;
    }
  }
  return OkStatus();
}

// a <op> b for + - * / %, into a. REQUIRES: both int64 or NULL.
Status ApplyArithmetic(Op op, Value& a, const Value& b) {
  if (a.is_null() || b.is_null()) {
    a = Value::Null();
    return OkStatus();
  }
  if (a.type == Type::kNumeric || b.type == Type::kNumeric) return ApplyNumericArithmetic(op, a, b);
  int64_t r = 0;
  switch (op) {
    case Op::kAdd:
      if (__builtin_add_overflow(a.i, b.i, &r)) return OutOfRange();
      break;
    case Op::kSub:
      if (__builtin_sub_overflow(a.i, b.i, &r)) return OutOfRange();
      break;
    case Op::kMul:
      if (__builtin_mul_overflow(a.i, b.i, &r)) return OutOfRange();
      break;
    case Op::kDiv:
      if (b.i == 0) return InvalidArgument("division by zero");
      if (a.i == INT64_MIN && b.i == -1) return OutOfRange();
      r = a.i / b.i;  // C++ truncates toward zero, as PostgreSQL does
      break;
    default:
      if (b.i == 0) return InvalidArgument("division by zero");
      // The sign of the dividend, as PostgreSQL; which answers 0 for INT64_MIN % -1, where
      // C++ would trap.
      r = b.i == -1 ? 0 : a.i % b.i;
      break;
  }
  a = Value::Int(r);
  return OkStatus();
}

// a <op> b for = <> < <= > >=, into a. REQUIRES: same types or NULL.
void ApplyComparison(Op op, Value& a, const Value& b) {
  if (a.is_null() || b.is_null()) {
    a = Value::Null();
    return;
  }
  const int c = Compare(a, b);
  bool r = false;
  switch (op) {
    case Op::kEq:
      r = c == 0;
      break;
    case Op::kNe:
      r = c != 0;
      break;
    case Op::kLt:
      r = c < 0;
      break;
    case Op::kLe:
      r = c <= 0;
      break;
    case Op::kGt:
      r = c > 0;
      break;
    default:
      r = c >= 0;
      break;
  }
  a = Value::Bool(r);
}

// a AND b or a OR b in Kleene logic, into a: the deciding value (false for AND, true for
// OR) wins, then NULL.
void ApplyLogic(Op op, Value& a, const Value& b) {
  const bool decider = op == Op::kOr;
  const auto decides = [decider](const Value& v) { return !v.is_null() && (v.i != 0) == decider; };
  if (decides(a) || decides(b)) {
    a = Value::Bool(decider);
  } else if (a.is_null() || b.is_null()) {
    a = Value::Null();
  } else {
    a = Value::Bool(!decider);
  }
}

// a IN (items), into a: true if some item equals a; else NULL if a or some item is NULL;
// else false.
void ApplyIn(Value& a, const Value* items, int count) {
  bool saw_null = a.is_null();
  for (int k = 0; k < count && !a.is_null(); ++k) {
    if (items[k].is_null()) {
      saw_null = true;
    } else if (Compare(a, items[k]) == 0) {
      a = Value::Bool(true);
      return;
    }
  }
  a = saw_null ? Value::Null() : Value::Bool(false);
}

// lower(a) or upper(a), ASCII letters only (PostgreSQL under COLLATE "C"); the result's
// bytes go to `arena`.
void ApplyCase(Op op, Value& a, std::deque<std::string>& arena) {
  if (a.is_null()) return;
  std::string& text = arena.emplace_back(a.s);
  for (char& c : text) {
    if (op == Op::kLower && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (op == Op::kUpper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  a = Value::Text(text);
}

// Fails unless `row` has the schema's width and each column in `used` holds NULL or a
// value of the column's type.
Status CheckRow(const SourceSchema& source, const std::vector<int32_t>& used, RowView row) {
  if (row.size() != source.columns.size()) {
    return InvalidArgument(fmt::format("a row of source {} needs {} columns, got {}", source.name,
                                       source.columns.size(), row.size()));
  }
  for (const int32_t index : used) {
    const Value& cell = row[static_cast<size_t>(index)];
    const SourceSchema::Column& column = source.columns[static_cast<size_t>(index)];
    if (!cell.is_null() && cell.type != column.type) {
      return MakeError(ErrorCode::kWrongType,
                       fmt::format("column {} of source {} must be {}, not {}", column.name,
                                   source.name, TypeName(column.type), TypeName(cell.type)));
    }
  }
  return OkStatus();
}

}  // namespace

Result<Evaluation> CompiledCounter::Evaluate(RowView row, EvalScratch& scratch) const {
  if (auto s = CheckRow(source_, columns_used_, row); !s) return tl::unexpected(s.error());
  scratch.stack_.resize(static_cast<size_t>(max_stack_));
  scratch.key_.resize(key_columns_.size());
  scratch.temps_.resize(static_cast<size_t>(temp_count_));
  if (layout_ != Layout::kPlain) scratch.args_.assign(aggregates_.size(), Value::Bool(true));
  scratch.arena_.clear();
  Value* const stack = scratch.stack_.data();
  int sp = 0;  // the number of values on the stack; stack[sp - 1] is the top

  Evaluation out;
  const Instr* const code = code_.data();
  const size_t size = code_.size();
  for (size_t pc = 0; pc < size; ++pc) {
    const Instr& instr = code[pc];
    const auto target = static_cast<size_t>(instr.arg) - 1;  // a jump's pc before the ++
    switch (instr.op) {
      case Op::kColumn:
        stack[sp++] = row[static_cast<size_t>(instr.arg)];
        break;
      case Op::kConst:
        stack[sp++] = constants_[static_cast<size_t>(instr.arg)];
        break;
      case Op::kNeg:
      case Op::kNot:
      case Op::kIsNull:
      case Op::kIsNotNull:
      case Op::kDateTrunc:
        if (auto s = ApplyUnary(instr, stack[sp - 1]); !s) return tl::unexpected(s.error());
        break;
      case Op::kAdd:
      case Op::kSub:
      case Op::kMul:
      case Op::kDiv:
      case Op::kMod:
        --sp;
        if (auto s = ApplyArithmetic(instr.op, stack[sp - 1], stack[sp]); !s) {
          return tl::unexpected(s.error());
        }
        break;
      case Op::kEq:
      case Op::kNe:
      case Op::kLt:
      case Op::kLe:
      case Op::kGt:
      case Op::kGe:
        --sp;
        ApplyComparison(instr.op, stack[sp - 1], stack[sp]);
        break;
      case Op::kAnd:
      case Op::kOr:
        --sp;
        ApplyLogic(instr.op, stack[sp - 1], stack[sp]);
        break;
      case Op::kIn:
        sp -= instr.arg;
        ApplyIn(stack[sp - 1], stack + sp, instr.arg);
        break;
      case Op::kLower:
      case Op::kUpper:
        ApplyCase(instr.op, stack[sp - 1], scratch.arena_);
        break;
      case Op::kJump:
        pc = target;
        break;
      case Op::kJumpIfFalse:
        if (IsFalse(stack[sp - 1])) pc = target;
        break;
      case Op::kJumpIfTrue:
        if (IsTrue(stack[sp - 1])) pc = target;
        break;
      case Op::kJumpIfNotTrue:
        if (!IsTrue(stack[--sp])) pc = target;
        break;
      case Op::kJumpIfNotNull:
        if (!stack[sp - 1].is_null()) pc = target;
        break;
      case Op::kPop:
        --sp;
        break;
      case Op::kStoreTemp:
        scratch.temps_[static_cast<size_t>(instr.arg)] = stack[sp - 1];
        break;
      case Op::kLoadTemp:
        stack[sp++] = scratch.temps_[static_cast<size_t>(instr.arg)];
        break;
      case Op::kFilter:
        if (!IsTrue(stack[--sp])) return out;  // passes = false
        break;
      case Op::kKey:
        scratch.key_[static_cast<size_t>(instr.arg)] = stack[--sp];
        break;
      case Op::kValueCount:
        out.value = stack[--sp].is_null() ? 0 : 1;
        break;
      case Op::kValueSum: {
        const Value& a = stack[--sp];
        if (a.is_null()) {
          out.value = 0;
        } else if (a.scale == instr.arg) {
          out.value = a.i;
        } else {
          const std::optional<int64_t> units = Rescale(a.i, a.scale, instr.arg);
          if (!units) return NumericOutOfRange();
          out.value = *units;
        }
        break;
      }
      case Op::kValueOne:
        out.value = 1;
        break;
      case Op::kArgument:
        scratch.args_[static_cast<size_t>(instr.arg)] = stack[--sp];
        break;
    }
  }
  out.passes = true;
  out.key = scratch.key_;
  out.args = scratch.args_;
  return out;
}

std::string CompiledCounter::Explain() const {
  std::string out =
      fmt::format("counter {} on {}\n", QuoteIdentifier(name_), QuoteIdentifier(source_.name));
  out += fmt::format("  sql: {}\n", sql_);
  out += "  key:";
  if (key_columns_.empty()) out += " (none)";
  for (size_t i = 0; i < key_columns_.size(); ++i) {
    const KeyColumn& key = key_columns_[i];
    out += fmt::format("{} {} {} = {}", i > 0 ? "," : "", key.name, TypeName(key.type), key.sql);
  }
  out += fmt::format("\n  filter: {}\n", filter_sql_.empty() ? "(none)" : filter_sql_);
  out += fmt::format("  value: {}\n", value_sql_);
  if (layout_ != Layout::kPlain) {
    out += fmt::format("  layout: {}\n", layout_ == Layout::kDistinct ? "distinct" : "composite");
  }
  if (retention_) {
    out += fmt::format("  retention: {} of time bucket {}\n", RetentionText(*retention_),
                       key_columns_[time_bucket_->column].name);
  }
  out += "  reads:";
  for (const int32_t index : columns_used_) {
    const SourceSchema::Column& column = source_.columns[static_cast<size_t>(index)];
    out += fmt::format(" #{} {} {};", index, column.name, TypeName(column.type));
  }
  if (columns_used_.empty()) out += " (none)";
  if (out.back() == ';') out.pop_back();
  out += fmt::format("\n  program (stack {}):\n", max_stack_);
  for (size_t pc = 0; pc < code_.size(); ++pc) {
    const Instr& instr = code_[pc];
    std::string operand;
    switch (instr.op) {
      case Op::kColumn:
        operand =
            fmt::format(" #{} {}", instr.arg, source_.columns[static_cast<size_t>(instr.arg)].name);
        break;
      case Op::kConst:
        operand = fmt::format(" {}", DebugString(constants_[static_cast<size_t>(instr.arg)]));
        break;
      case Op::kValueSum:
        if (instr.arg > 0) operand = fmt::format(" scale {}", instr.arg);
        break;
      case Op::kIn:
      case Op::kKey:
      case Op::kArgument:
      case Op::kStoreTemp:
      case Op::kLoadTemp:
      case Op::kJump:
      case Op::kJumpIfFalse:
      case Op::kJumpIfTrue:
      case Op::kJumpIfNotTrue:
      case Op::kJumpIfNotNull:
        operand = fmt::format(" {}", instr.arg);
        break;
      case Op::kDateTrunc:
        operand = fmt::format(" '{}'", TimeUnitName(static_cast<TimeUnit>(instr.arg)));
        break;
      default:
        break;
    }
    out += fmt::format("    {:>3}  {}{}\n", pc, OpName(instr.op), operand);
  }
  return out;
}

}  // namespace tally::definitions
