// A compiled counter definition: a flat program for a small stack machine, and the
// evaluator that runs it over one source row.
//
// Why a stack machine: the compiler resolves every column to its index in the source row
// and every operator to an opcode once, so a row costs one pass over a short instruction
// array with no name lookups, no string compares of identifiers and, once the caller's
// scratch has grown, no allocation but for the text lower/upper make. Jumps give SQL's
// lazy evaluation where PostgreSQL has it: AND/OR stop at the first deciding operand,
// CASE and coalesce evaluate only the branch taken, and WHERE runs before the group keys
// (a key's division by zero in a row that fails the filter is no error, as in PostgreSQL).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/definitions/time_util.h"
#include "engine/definitions/value.h"

namespace tally::definitions {

// The opcodes. Operands are popped right first; "peek" jumps leave the stack unchanged.
enum class Op : uint8_t {
  kColumn,         // push row[arg]
  kConst,          // push constants[arg]
  kNeg,            // int64: -a
  kAdd,            // int64: a + b, overflow is an error
  kSub,            // int64: a - b
  kMul,            // int64: a * b
  kDiv,            // int64: a / b truncated toward zero; b = 0 is an error
  kMod,            // int64: a % b with the sign of a; b = 0 is an error
  kEq,             // a = b (same type); NULL if either is NULL
  kNe,             // a <> b
  kLt,             // a < b
  kLe,             // a <= b
  kGt,             // a > b
  kGe,             // a >= b
  kNot,            // three-valued NOT
  kAnd,            // three-valued AND of two bools
  kOr,             // three-valued OR of two bools
  kIsNull,         // a IS NULL
  kIsNotNull,      // a IS NOT NULL
  kIn,             // a IN (arg values): pops arg + 1 values
  kLower,          // lower(text), ASCII letters only
  kUpper,          // upper(text), ASCII letters only
  kDateTrunc,      // date_trunc(unit arg, timestamp)
  kJump,           // jump to arg
  kJumpIfFalse,    // peek: jump to arg when the top is false (AND short-circuit)
  kJumpIfTrue,     // peek: jump to arg when the top is true (OR short-circuit)
  kJumpIfNotTrue,  // pop: jump to arg unless true (CASE WHEN)
  kJumpIfNotNull,  // peek: jump to arg when the top is not NULL (coalesce)
  kPop,            // drop the top
  kStoreTemp,      // peek: temps[arg] = the top (a value used twice: BETWEEN, CASE x)
  kLoadTemp,       // push temps[arg]
  kFilter,         // pop: stop with "does not pass" unless true
  kKey,            // pop into key[arg]
  kValueCount,     // pop: value = 0 if NULL else 1 (count(expr))
  kValueSum,       // pop: value = 0 if NULL else the int64, or the numeric's units at scale arg
  kValueOne,       // value = 1 (count(*))
  kArgument,       // pop into args[arg]: the argument of aggregate arg (not a plain counter)
};

// "column", "add", ... for listings.
std::string_view OpName(Op op);

// One instruction: an opcode and its operand (column index, constant index, jump target,
// key slot, temporary, list length or time unit).
struct Instr {
  Op op = Op::kPop;
  int32_t arg = 0;
};

// The aggregates a counter keeps.
enum class Aggregate : uint8_t {
  kCountStar,      // count(*)
  kCount,          // count(x): the rows whose x is not NULL
  kSum,            // sum(x) of int64 or numeric x, exact
  kCountDistinct,  // count(DISTINCT x)
  kMin,            // min(x) of int64, numeric or timestamp x
  kMax,            // max(x)
  kAvg,            // avg(x) of int64 or numeric x: kept as its sum and count
};

// One aggregate of a counter: a select item after the key columns.
struct AggregateColumn {
  // Its alias, else the function's name ("count", "sum", "min", "max", "avg"): the field
  // that holds it in a read of a counter with several aggregates. Distinct within a counter.
  std::string name;
  Aggregate kind = Aggregate::kCountStar;
  Type type = Type::kNull;  // of its argument; kNull for count(*)
  int scale = 0;            // a numeric argument's: its sum, min, max and avg keep this scale
  std::string sql;          // as the plan shows it: "sum(price)"
  // Its argument as PostgreSQL reads it, fully parenthesised ("price", "(price * 2)");
  // empty for count(*). What `tally verify --repair` reads a group's records by.
  std::string argument_sql;
};

// How a counter keeps its groups in the keyspace (the storage is described in
// engine/derived/aggregate_state.h):
enum class Layout : uint8_t {
  // One count(*), count(x) or sum(x): the group's key holds its value, kept by increments
  // alone; a group whose value is 0 is no group.
  kPlain,
  // One count(DISTINCT x): the key holds the number of distinct values; hidden records hold
  // the rows of each value.
  kDistinct,
  // min, max or avg, or several aggregates: the key holds the group's number of rows (a
  // group exists while it has rows, as in PostgreSQL's GROUP BY); hidden records hold each
  // aggregate's state.
  kComposite,
};

// One group key column of a compiled counter.
struct KeyColumn {
  std::string name;  // the alias, or the column name, or "key<i>"
  Type type = Type::kNull;
  std::string sql;  // the expression as the plan shows it
};

// The key column of a counter that is a time bucket: a select item date_trunc(unit, ...).
struct TimeBucket {
  size_t column = 0;  // its index among the key columns
  TimeUnit unit = TimeUnit::kDay;
};

// A source's schema: its name and typed columns, in row order.
struct SourceSchema {
  struct Column {
    std::string name;
    Type type = Type::kNull;
    // numeric(precision, scale): scale 0..18, precision 1..1000 (kept only to spell the
    // column back); 0 for other types.
    int precision = 0;
    int scale = 0;
  };
  std::string name;
  std::vector<Column> columns;
};

// Per-thread evaluation state: the value stack, the key being built and the arena of text
// made by lower/upper. Reused across rows so that evaluation does not allocate.
class EvalScratch {
 public:
  EvalScratch() = default;
  ~EvalScratch() = default;
  EvalScratch(const EvalScratch&) = delete;
  EvalScratch& operator=(const EvalScratch&) = delete;
  EvalScratch(EvalScratch&&) = default;
  EvalScratch& operator=(EvalScratch&&) = default;

 private:
  friend class CompiledCounter;
  std::vector<Value> stack_;
  std::vector<Value> key_;
  std::vector<Value> temps_;
  std::vector<Value> args_;
  std::deque<std::string> arena_;  // a deque: adding a string never moves the others
};

// The outcome of one row. `key` views text of the row, the scratch and the counter's
// constants: valid until the scratch is used again and while the row's text lives.
struct Evaluation {
  bool passes = false;         // the row passes WHERE (a NULL condition does not pass)
  std::span<const Value> key;  // one Value per key column, in select-list order
  // A plain counter's term: 1 for count(*); 0 or 1 for count(expr); sum's term, NULL as 0,
  // a numeric's in units of the aggregate's scale.
  int64_t value = 0;
  // Any other counter's: the argument of each aggregate, in order (true for count(*)).
  std::span<const Value> args;
};

// A checked, compiled CREATE COUNTER: immutable, so any number of threads may evaluate
// it at once, each with its own EvalScratch.
class CompiledCounter {
 public:
  CompiledCounter() = default;
  ~CompiledCounter() = default;
  // Movable, not copyable: text constants are views into constant_text_, whose strings a
  // move keeps in place and a copy would not.
  CompiledCounter(CompiledCounter&&) = default;
  CompiledCounter& operator=(CompiledCounter&&) = default;
  CompiledCounter(const CompiledCounter&) = delete;
  CompiledCounter& operator=(const CompiledCounter&) = delete;

  const std::string& name() const { return name_; }
  const SourceSchema& source() const { return source_; }
  const std::vector<KeyColumn>& key_columns() const { return key_columns_; }
  // The aggregates, in select-list order (one at least).
  const std::vector<AggregateColumn>& aggregates() const { return aggregates_; }
  // The first aggregate's kind.
  Aggregate aggregate() const { return aggregates_.front().kind; }
  Layout layout() const { return layout_; }
  const std::string& sql() const { return sql_; }
  // The WHERE condition as PostgreSQL reads it, fully parenthesised; empty without one.
  const std::string& filter_sql() const { return filter_sql_; }
  // The indexes in source() of the columns the program reads, ascending.
  const std::vector<int32_t>& columns_used() const { return columns_used_; }
  // The time bucket, when exactly one key column is a date_trunc(...) select item: what
  // range reads sum over and what retention removes.
  const std::optional<TimeBucket>& time_bucket() const { return time_bucket_; }
  // WITH (retention = '...'): how long its time buckets are kept. Only with a time bucket.
  const std::optional<Retention>& retention() const { return retention_; }
  // The start of the time bucket of `key`, a canonical key of this counter, read from its
  // spelling; nullopt without a time bucket, for a NULL bucket or a malformed key.
  std::optional<int64_t> BucketOfKey(std::string_view key) const;
  // The retention rule (BucketExpired in time_util.h) for this counter's bucket starting at
  // `bucket_start`; false without a retention.
  bool Expired(int64_t bucket_start, int64_t now_micros) const {
    return retention_ && BucketExpired(time_bucket_->unit, bucket_start, *retention_, now_micros);
  }
  // True when `key`, a canonical key of this counter, is a group whose time bucket is past
  // retention at `now_micros`: Expired of BucketOfKey. False without a retention (without
  // reading the key) and for a NULL bucket, which has no time.
  bool KeyExpired(std::string_view key, int64_t now_micros) const;
  // The normalised definition, "CREATE COUNTER <name> AS <sql()>", and " WITH (retention =
  // '30 days')" when there is one: parsed and compiled against the same source, it gives
  // this counter again (the same plan).
  std::string create_sql() const;

  // Runs the program over `row`, which must follow source(): one value per column, each
  // NULL or of the column's type (else kWrongType naming the column). An arithmetic
  // overflow (kOverflow), division by zero or a timestamp out of range
  // (kInvalidArgument) fails this row only.
  Result<Evaluation> Evaluate(RowView row, EvalScratch& scratch) const;

  // The canonical key of an evaluation's group (see EncodeKey in value.h).
  std::string Key(const Evaluation& evaluation) const { return EncodeKey(name_, evaluation.key); }

  // The plan as the golden files show it: key columns, filter, value, columns read and
  // the program listing.
  std::string Explain() const;

 private:
  friend class Compiler;

  std::string name_;
  std::string sql_;  // the normalised SELECT
  SourceSchema source_;
  std::vector<KeyColumn> key_columns_;
  std::vector<AggregateColumn> aggregates_;
  Layout layout_ = Layout::kPlain;
  std::string filter_sql_;
  std::string value_sql_;
  std::vector<Instr> code_;
  std::vector<Value> constants_;
  std::vector<std::string> constant_text_;  // owns the text of text constants
  std::vector<int32_t> columns_used_;       // checked against the row before running
  std::optional<TimeBucket> time_bucket_;
  std::optional<Retention> retention_;
  int32_t max_stack_ = 0;
  int32_t temp_count_ = 0;
};

}  // namespace tally::definitions
