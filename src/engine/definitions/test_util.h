// Helpers shared by the tests of definitions: the blog model's sources and a row builder.
#pragma once

#include <string_view>
#include <vector>

#include "engine/definitions/blog_model.h"
#include "engine/definitions/compiler.h"
#include "engine/definitions/program.h"

namespace tally::definitions::testing {

// A posts row of NULLs, to be filled column by column.
inline std::vector<Value> NullPost() { return std::vector<Value>(kPostColumns); }

// Compiles `sql` against posts. REQUIRES: it compiles (fails the test otherwise).
inline CompiledCounter MustCompile(std::string_view sql) {
  auto compiled = CompileSql(sql, PostsCatalog);
  EXPECT_TRUE(compiled.has_value()) << sql << ": " << compiled.error().message;
  return compiled ? std::move(*compiled) : CompiledCounter();
}

}  // namespace tally::definitions::testing
