// The golden-file runner of the definition language: every tests/sql/*.test file holds
// cases of a statement (or script) and the exact output expected, the compiled plan or
// the error. File format:
//
//   # a comment line (only between cases)
//   CREATE COUNTER c AS SELECT ...        <- one or more lines, no blank line
//   ----
//   counter c on posts                   <- the expected output, up to a blank line or EOF
//   ...
//
// Output: for each statement of the script, the plan (CompiledCounter::Explain) of a
// CREATE COUNTER, the normalised statement (SourceSql) of a CREATE SOURCE, "DROP COUNTER
// name", "SHOW COUNTERS", "DROP SOURCE name", "SHOW SOURCES", or "error: <message>" (then
// the script stops). Run with TALLY_REWRITE_GOLDEN=1 to write the actual outputs back into
// the files (then review the diff). The sources the cases may read are in TestCatalog
// below, and those the script itself creates (a DROP SOURCE forgets one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/definitions/compiler.h"
#include "engine/definitions/parser.h"
#include "engine/definitions/program.h"
#include "engine/definitions/test_util.h"

namespace tally::definitions {
namespace {

// The blog model's posts (test_util.h), likes of posts, and orders.
const SourceSchema* TestCatalog(std::string_view name) {
  static const SourceSchema kLikes{"likes",
                                   {{"id", Type::kInt64},
                                    {"post_id", Type::kInt64},
                                    {"user_id", Type::kInt64},
                                    {"created_at", Type::kTimestamp},
                                    {"Kind", Type::kText}}};
  // Orders of a shop: money in numeric columns, a weight in a float one.
  static const SourceSchema kOrders{"orders",
                                    {{"id", Type::kInt64},
                                     {"customer_id", Type::kInt64},
                                     {"product_id", Type::kInt64},
                                     {"total", Type::kNumeric, 12, 2},
                                     {"quantity", Type::kInt64},
                                     {"discount", Type::kNumeric, 5, 3},
                                     {"weight", Type::kFloat},
                                     {"status", Type::kText},
                                     {"created_at", Type::kTimestamp}}};
  if (name == "posts") return &testing::PostsSchema();
  if (name == "likes") return &kLikes;
  if (name == "orders") return &kOrders;
  return nullptr;
}

// Runs one case. Also checks that what compiles survives its normalised spelling: a
// counter's create_sql() and a source's SourceSql() compile back to the same plan or
// schema; a mismatch is added to `round_trip_errors`.
std::string RunScript(const std::string& sql, std::vector<std::string>* round_trip_errors) {
  auto script = ParseScript(sql);
  if (!script) return "error: " + script.error().message;
  // The script's own CREATE SOURCEs, visible to its later statements before TestCatalog.
  std::vector<SourceSchema> created;
  const Catalog catalog = [&created](std::string_view name) -> const SourceSchema* {
    for (const SourceSchema& schema : created) {
      if (schema.name == name) return &schema;
    }
    return TestCatalog(name);
  };
  std::string out;
  for (const Statement& statement : *script) {
    if (const auto* create = std::get_if<CreateCounter>(&statement)) {
      auto compiled = Compile(*create, catalog);
      if (!compiled) return out + "error: " + compiled.error().message;
      out += compiled->Explain();
      auto again = CompileSql(compiled->create_sql(), catalog);
      if (!again || again->Explain() != compiled->Explain()) {
        round_trip_errors->push_back(compiled->create_sql() + " gives " +
                                     (again ? again->Explain() : again.error().message));
      }
    } else if (const auto* drop = std::get_if<DropCounter>(&statement)) {
      out += "DROP COUNTER " + QuoteIdentifier(drop->name) + "\n";
    } else if (std::holds_alternative<ShowCounters>(statement)) {
      out += "SHOW COUNTERS\n";
    } else if (const auto* source = std::get_if<CreateSource>(&statement)) {
      auto schema = CompileSource(*source);
      if (!schema) return out + "error: " + schema.error().message;
      out += SourceSql(*schema) + "\n";
      auto reparsed = ParseStatement(SourceSql(*schema));
      const auto* again = reparsed ? std::get_if<CreateSource>(&*reparsed) : nullptr;
      auto schema_again = again != nullptr ? CompileSource(*again) : Result<SourceSchema>();
      if (again == nullptr || !schema_again || SourceSql(*schema_again) != SourceSql(*schema)) {
        round_trip_errors->push_back(SourceSql(*schema) + " does not give the same schema");
      }
      std::erase_if(created, [&](const SourceSchema& s) { return s.name == schema->name; });
      created.push_back(std::move(*schema));
    } else if (const auto* drop_source = std::get_if<DropSource>(&statement)) {
      out += "DROP SOURCE " + QuoteIdentifier(drop_source->name) + "\n";
      std::erase_if(created, [&](const SourceSchema& s) { return s.name == drop_source->name; });
    } else {
      out += "SHOW SOURCES\n";
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// One piece of a golden file: a verbatim line (comment, blank) or a case.
struct Piece {
  bool is_case = false;
  std::string line;       // !is_case
  std::string statement;  // is_case, lines joined with '\n'
  std::string expected;   // is_case, lines joined with '\n'
  int line_number = 0;    // of the statement's first line
};

std::vector<Piece> ReadGolden(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<Piece> pieces;
  size_t i = 0;
  while (i < lines.size()) {
    if (lines[i].empty() || lines[i][0] == '#') {
      pieces.push_back(Piece{false, lines[i], "", "", 0});
      ++i;
      continue;
    }
    Piece piece;
    piece.is_case = true;
    piece.line_number = static_cast<int>(i + 1);
    while (i < lines.size() && lines[i] != "----" && !lines[i].empty()) {
      piece.statement += (piece.statement.empty() ? "" : "\n") + lines[i++];
    }
    if (i < lines.size() && lines[i] == "----") {
      ++i;
      bool first = true;
      while (i < lines.size() && !lines[i].empty()) {
        piece.expected += (first ? "" : "\n") + lines[i++];
        first = false;
      }
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

std::vector<std::string> GoldenFiles() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(TALLY_SQL_GOLDEN_DIR)) {
    if (entry.path().extension() == ".test") files.push_back(entry.path().filename());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesExpectedOutput) {
  const std::filesystem::path path = std::filesystem::path(TALLY_SQL_GOLDEN_DIR) / GetParam();
  std::vector<Piece> pieces = ReadGolden(path);
  // Read once per file, before any test thread could exist.
  const char* rewrite_env = std::getenv("TALLY_REWRITE_GOLDEN");  // NOLINT(concurrency-mt-unsafe)
  const bool rewrite = rewrite_env != nullptr && std::string(rewrite_env) == "1";
  int cases = 0;
  std::vector<std::string> round_trip_errors;
  for (Piece& piece : pieces) {
    if (!piece.is_case) continue;
    ++cases;
    const std::string actual = RunScript(piece.statement, &round_trip_errors);
    if (rewrite) {
      piece.expected = actual;
    } else {
      EXPECT_EQ(actual, piece.expected)
          << GetParam() << ":" << piece.line_number << ": " << piece.statement;
    }
  }
  EXPECT_GT(cases, 0) << GetParam() << " has no cases";
  for (const std::string& error : round_trip_errors) ADD_FAILURE() << GetParam() << ": " << error;
  if (rewrite) {
    std::ofstream out(path, std::ios::trunc);
    for (const Piece& piece : pieces) {
      if (piece.is_case) {
        // An empty output is the blank line that ends the case: writing one more would
        // add a line at every rewrite.
        out << piece.statement << "\n----\n";
        if (!piece.expected.empty()) out << piece.expected << "\n";
      } else {
        out << piece.line << "\n";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sql, GoldenTest, ::testing::ValuesIn(GoldenFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.find('.'));
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// PostgreSQL's limit of 1600 columns, too long a statement for a golden file.
TEST(CreateSourceTest, AtMost1600Columns) {
  auto statement = [](int columns) {
    std::string sql = "CREATE SOURCE wide (";
    for (int i = 0; i < columns; ++i) sql += (i > 0 ? ", c" : "c") + std::to_string(i) + " bigint";
    return sql + ")";
  };
  auto parsed = ParseStatement(statement(1600));
  ASSERT_TRUE(parsed);
  auto schema = CompileSource(std::get<CreateSource>(*parsed));
  ASSERT_TRUE(schema) << schema.error().message;
  EXPECT_EQ(schema->columns.size(), 1600U);
  EXPECT_EQ(schema->columns[1599].name, "c1599");

  parsed = ParseStatement(statement(1601));
  ASSERT_TRUE(parsed);
  schema = CompileSource(std::get<CreateSource>(*parsed));
  ASSERT_FALSE(schema);
  EXPECT_EQ(schema.error().message, "line 1, column 21311: a source has at most 1600 columns");
}

// Random mutations of every golden statement: each must compile or fail with a positioned
// error, never crash (run under ASan/UBSan too); what compiles must evaluate a row and
// compile again, to the same plan, from its normalised spelling.
TEST(FrontEndRobustnessTest, MutatedStatementsFailCleanly) {
  std::vector<std::string> seeds;
  for (const std::string& file : GoldenFiles()) {
    for (const Piece& piece : ReadGolden(std::filesystem::path(TALLY_SQL_GOLDEN_DIR) / file)) {
      if (piece.is_case) seeds.push_back(piece.statement);
    }
  }
  ASSERT_GT(seeds.size(), 100U);
  static constexpr std::string_view kAlphabet[] = {"(",
                                                   ")",
                                                   ",",
                                                   ";",
                                                   "'",
                                                   "\"",
                                                   "-",
                                                   "*",
                                                   "/",
                                                   "%",
                                                   "=",
                                                   "<",
                                                   ">",
                                                   " ",
                                                   "\n",
                                                   "0",
                                                   "9223372036854775807",
                                                   "NULL",
                                                   "NOT",
                                                   "AND",
                                                   "OR",
                                                   "CASE",
                                                   "WHEN",
                                                   "END",
                                                   "IN",
                                                   "BETWEEN",
                                                   "count(*)",
                                                   "sum(",
                                                   "rating",
                                                   "title",
                                                   "é",
                                                   "\xff",
                                                   "--",
                                                   "/*",
                                                   "::",
                                                   "."};
  std::mt19937_64 rng(42);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const std::vector<Value> row(TestCatalog("posts")->columns.size());
  EvalScratch scratch;
  int compiled = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string sql = seeds[pick(seeds.size())];
    for (size_t edits = 1 + pick(3); edits > 0; --edits) {
      const size_t at = pick(sql.size() + 1);
      switch (pick(3)) {
        case 0:
          sql.erase(at, pick(8));
          break;
        case 1:
          sql.insert(at, kAlphabet[pick(std::size(kAlphabet))]);
          break;
        default:
          sql.replace(at, pick(4), kAlphabet[pick(std::size(kAlphabet))]);
          break;
      }
    }
    auto statement = ParseStatement(sql);
    if (const auto* source = statement ? std::get_if<CreateSource>(&*statement) : nullptr) {
      auto schema = CompileSource(*source);
      if (!schema) {
        ASSERT_EQ(schema.error().message.rfind("line ", 0), 0U) << sql;
        continue;
      }
      auto again = ParseStatement(SourceSql(*schema));
      ASSERT_TRUE(again && std::holds_alternative<CreateSource>(*again)) << SourceSql(*schema);
      auto schema_again = CompileSource(std::get<CreateSource>(*again));
      ASSERT_TRUE(schema_again && SourceSql(*schema_again) == SourceSql(*schema)) << sql;
      ++compiled;
      continue;
    }
    auto counter = CompileSql(sql, TestCatalog);
    if (!counter) {
      const std::string& message = counter.error().message;
      // Not a CREATE COUNTER at all is the one unpositioned error of CompileSql.
      if (message == "expected a CREATE COUNTER statement") continue;
      ASSERT_EQ(message.rfind("line ", 0), 0U) << sql << "\n" << message;
      ASSERT_NE(message.find(", column "), std::string::npos) << sql << "\n" << message;
      continue;
    }
    ++compiled;
    auto again = CompileSql(counter->create_sql(), TestCatalog);
    ASSERT_TRUE(again) << sql << "\n" << counter->create_sql() << "\n" << again.error().message;
    ASSERT_EQ(again->Explain(), counter->Explain()) << sql;
    if (counter->source().name != "posts") continue;
    (void)counter->Evaluate(row, scratch);  // an error is fine; a crash is not
  }
  EXPECT_GT(compiled, 100);
}

}  // namespace
}  // namespace tally::definitions
