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
// CREATE COUNTER, "DROP COUNTER name", "SHOW COUNTERS", or "error: <message>" (then the
// script stops). Run with TALLY_REWRITE_GOLDEN=1 to write the actual outputs back into the
// files (then review the diff). The sources the cases may read are in TestCatalog below.
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

// The blog model of the brief, and likes of posts.
const SourceSchema* TestCatalog(std::string_view name) {
  static const SourceSchema kLikes{"likes",
                                   {{"id", Type::kInt64},
                                    {"post_id", Type::kInt64},
                                    {"user_id", Type::kInt64},
                                    {"created_at", Type::kTimestamp},
                                    {"Kind", Type::kText}}};
  if (name == "posts") return &testing::PostsSchema();
  if (name == "likes") return &kLikes;
  return nullptr;
}

std::string RunScript(const std::string& sql) {
  auto script = ParseScript(sql);
  if (!script) return "error: " + script.error().message;
  std::string out;
  for (const Statement& statement : *script) {
    if (const auto* create = std::get_if<CreateCounter>(&statement)) {
      auto compiled = Compile(*create, TestCatalog);
      if (!compiled) return out + "error: " + compiled.error().message;
      out += compiled->Explain();
    } else if (const auto* drop = std::get_if<DropCounter>(&statement)) {
      out += "DROP COUNTER " + QuoteIdentifier(drop->name) + "\n";
    } else {
      out += "SHOW COUNTERS\n";
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
  for (Piece& piece : pieces) {
    if (!piece.is_case) continue;
    ++cases;
    const std::string actual = RunScript(piece.statement);
    if (rewrite) {
      piece.expected = actual;
    } else {
      EXPECT_EQ(actual, piece.expected)
          << GetParam() << ":" << piece.line_number << ": " << piece.statement;
    }
  }
  EXPECT_GT(cases, 0) << GetParam() << " has no cases";
  if (rewrite) {
    std::ofstream out(path, std::ios::trunc);
    for (const Piece& piece : pieces) {
      if (piece.is_case) {
        out << piece.statement << "\n----\n" << piece.expected << "\n";
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

// Random mutations of every golden statement: each must compile or fail with a positioned
// error, never crash (run under ASan/UBSan too), and what compiles must evaluate a row.
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
    if (counter->source().name != "posts") continue;
    (void)counter->Evaluate(row, scratch);  // an error is fine; a crash is not
  }
  EXPECT_GT(compiled, 100);
}

}  // namespace
}  // namespace tally::definitions
