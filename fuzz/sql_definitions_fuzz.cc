// libFuzzer target for the definition language (POST /v1/definitions, DEFINE, --definitions):
// the input is a script. Besides not crashing:
//   - tokens come in source order, the last one the end; an identifier quoted by
//     QuoteIdentifier lexes back to itself;
//   - every error of the front end reads "line L, column C: ...";
//   - a statement ParseStatement accepts, ParseScript accepts as one statement;
//   - a compiled source's SourceSql compiles back to the same schema, and a compiled
//     counter's create_sql() to the same plan (Explain);
//   - a compiled counter evaluated over rows of extreme values (NULLs, INT64_MIN, the ends
//     of the timestamp range, text with ':' and '\') either fails that row with an error of
//     the evaluator's kinds or gives a key of one value per key column, of its type, whose
//     EncodeKey reads back part by part, with the time bucket BucketOfKey finds;
//   - the formula moves nothing for a row that did not change, and an insert and a delete
//     of the same row move its group by opposite amounts.
// Sources: posts and likes (as the golden files have them) and those the script creates.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/definitions/blog_model.h"
#include "engine/definitions/compiler.h"
#include "engine/definitions/formula.h"
#include "engine/definitions/lexer.h"
#include "engine/definitions/parser.h"
#include "engine/definitions/program.h"
#include "fuzz_check.h"
#include "key_parts.h"

namespace tally::definitions {
namespace {

using fuzz::Check;

const SourceSchema kLikes{"likes",
                          {{"id", Type::kInt64},
                           {"post_id", Type::kInt64},
                           {"user_id", Type::kInt64},
                           {"created_at", Type::kTimestamp},
                           {"Kind", Type::kText}}};

void CheckFrontEndError(const Error& error) {
  Check(error.code == ErrorCode::kInvalidArgument, "a front-end error is kInvalidArgument",
        error.message);
  Check(error.message.starts_with("line "), "a front-end error has a position", error.message);
}

void CheckTokens(std::string_view sql) {
  auto tokens = Tokenize(sql);
  if (!tokens) {
    CheckFrontEndError(tokens.error());
    return;
  }
  Check(!tokens->empty() && tokens->back().kind == TokenKind::kEnd, "tokens end with the end");
  Position last{1, 1};
  for (const Token& token : *tokens) {
    const bool after = token.pos.line > last.line ||
                       (token.pos.line == last.line && token.pos.column >= last.column);
    Check(after, "tokens come in source order", token.raw);
    last = token.pos;
    if (token.kind != TokenKind::kIdentifier) continue;
    auto again = Tokenize(QuoteIdentifier(token.text));
    Check(again && again->size() == 2 && (*again)[0].kind == TokenKind::kIdentifier &&
              (*again)[0].text == token.text,
          "a quoted identifier lexes back to itself", token.text);
  }
}

// Values for rows: each type's extremes and ordinary values, NULL last.
Value RowValue(Type type, size_t pick) {
  static const int64_t kInts[] = {
      0, 1, -1, 7, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  static const int64_t kTimes[] = {0,
                                   1714571100123456,    // 2024-05-01 13:45:00.123456
                                   -62135596800000000,  // 0001-01-01
                                   253402300799999999,  // 9999-12-31 23:59:59.999999
                                   -1,
                                   std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max()};
  static const std::string_view kTexts[] = {"", "a:b\\c", "\\N", "Grüße", "ABC", "published"};
  const auto from = [pick](const auto& values) { return values[pick % std::size(values)]; };
  if (pick % 5 == 4) return Value::Null();
  switch (type) {
    case Type::kInt64:
      return Value::Int(from(kInts));
    case Type::kBool:
      return Value::Bool(pick % 2 == 1);
    case Type::kText:
      return Value::Text(from(kTexts));
    case Type::kTimestamp:
      return Value::Timestamp(from(kTimes));
    case Type::kNumeric:  // the blog model has no numeric or float column
    case Type::kFloat:
    case Type::kNull:
      break;
  }
  return Value::Null();
}

constexpr size_t kRows = 12;

std::vector<Value> MakeRow(const SourceSchema& schema, size_t row) {
  std::vector<Value> values;
  for (size_t c = 0; c < schema.columns.size(); ++c) {
    values.push_back(RowValue(schema.columns[c].type, row * 7 + c * 3 + row / 5));
  }
  return values;
}

void CheckEvaluation(const CompiledCounter& counter, const std::vector<Value>& row,
                     EvalScratch& scratch) {
  auto evaluation = counter.Evaluate(row, scratch);
  if (!evaluation) {
    const ErrorCode code = evaluation.error().code;
    Check(code == ErrorCode::kOverflow || code == ErrorCode::kInvalidArgument,
          "a row fails with an overflow or an invalid argument", evaluation.error().message);
    return;
  }
  const auto& columns = counter.key_columns();
  if (!evaluation->passes) return;
  Check(evaluation->key.size() == columns.size(), "a key has one value per key column");
  std::vector<Type> types;
  for (size_t i = 0; i < columns.size(); ++i) {
    const Value& part = evaluation->key[i];
    Check(part.is_null() || part.type == columns[i].type, "a key value has its column's type",
          columns[i].name);
    types.push_back(columns[i].type);
  }
  // A plain counter's term is its value; any other's are its aggregates' arguments.
  if (counter.layout() != Layout::kPlain) {
    Check(evaluation->args.size() == counter.aggregates().size(),
          "a counter that keeps records has an argument per aggregate");
  } else if (counter.aggregate() == Aggregate::kCountStar) {
    Check(evaluation->value == 1, "count(*) counts one");
  } else if (counter.aggregate() == Aggregate::kCount) {
    Check(evaluation->value == 0 || evaluation->value == 1, "count(x) counts zero or one");
  }
  const std::string key = counter.Key(*evaluation);
  fuzz::CheckKeyReadsBack(key, counter.name(), evaluation->key, types);
  if (const auto& bucket = counter.time_bucket()) {
    const Value& start = evaluation->key[bucket->column];
    const std::optional<int64_t> found = counter.BucketOfKey(key);
    Check(start.is_null() ? !found.has_value() : found == start.i, "BucketOfKey finds the bucket",
          key);
  }
}

void CheckFormula(const CompiledCounter& counter, const std::vector<Value>& row,
                  EvalScratch& scratch) {
  auto same = ComputeIncrements(counter, RowView(row), RowView(row), scratch);
  Check(!same || same->empty(), "an unchanged row moves nothing");
  auto insert = ComputeIncrements(counter, std::nullopt, RowView(row), scratch);
  auto remove = ComputeIncrements(counter, RowView(row), std::nullopt, scratch);
  if (!insert || !remove) return;
  Check(insert->size() <= 1 && insert->size() == remove->size(),
        "an insert and a delete move the same group");
  if (insert->empty()) return;
  Check((*insert)[0].key == (*remove)[0].key && (*insert)[0].delta == -(*remove)[0].delta,
        "a delete undoes an insert", (*insert)[0].key);
}

void CheckCounter(const CompiledCounter& counter, const Catalog& catalog) {
  auto again = CompileSql(counter.create_sql(), catalog);
  Check(again.has_value(), "create_sql() compiles", counter.create_sql());
  Check(again->Explain() == counter.Explain(), "create_sql() compiles to the same plan",
        counter.create_sql());
  EvalScratch scratch;
  for (size_t r = 0; r < kRows; ++r) {
    const std::vector<Value> row = MakeRow(counter.source(), r);
    CheckEvaluation(counter, row, scratch);
    CheckFormula(counter, row, scratch);
  }
}

void CheckSource(const SourceSchema& schema) {
  const std::string sql = SourceSql(schema);
  auto statement = ParseStatement(sql);
  Check(statement && std::holds_alternative<CreateSource>(*statement), "SourceSql parses", sql);
  auto again = CompileSource(std::get<CreateSource>(*statement));
  Check(again.has_value(), "SourceSql compiles", sql);
  bool same = again->name == schema.name && again->columns.size() == schema.columns.size();
  for (size_t i = 0; same && i < schema.columns.size(); ++i) {
    same = again->columns[i].name == schema.columns[i].name &&
           again->columns[i].type == schema.columns[i].type;
  }
  Check(same, "SourceSql compiles back to the same schema", sql);
}

void RunScript(std::string_view sql) {
  auto script = ParseScript(sql);
  auto single = ParseStatement(sql);
  if (single) Check(script && script->size() == 1, "one statement is a script of one", sql);
  if (!single) CheckFrontEndError(single.error());
  if (!script) {
    CheckFrontEndError(script.error());
    return;
  }
  // The script's own sources come before posts and likes, as in the golden files. A compiled
  // counter keeps a copy of its source's schema, so `created` may grow afterwards.
  std::vector<SourceSchema> created;
  const Catalog catalog = [&created](std::string_view name) -> const SourceSchema* {
    for (const SourceSchema& schema : created) {
      if (schema.name == name) return &schema;
    }
    if (name == "posts") return &testing::PostsSchema();
    if (name == kLikes.name) return &kLikes;
    return nullptr;
  };
  for (const Statement& statement : *script) {
    if (const auto* create = std::get_if<CreateCounter>(&statement)) {
      auto compiled = Compile(*create, catalog);
      if (!compiled) {
        CheckFrontEndError(compiled.error());
        continue;
      }
      CheckCounter(*compiled, catalog);
    } else if (const auto* source = std::get_if<CreateSource>(&statement)) {
      auto schema = CompileSource(*source);
      if (!schema) {
        CheckFrontEndError(schema.error());
        continue;
      }
      CheckSource(*schema);
      created.push_back(std::move(*schema));
    }
  }
}

}  // namespace
}  // namespace tally::definitions

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view sql(reinterpret_cast<const char*>(data), size);
  tally::definitions::CheckTokens(sql);
  tally::definitions::RunScript(sql);
  return 0;
}
