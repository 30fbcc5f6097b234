// CREATE SOURCE: its columns' PostgreSQL types mapped to tally's (compiler.h has the
// table), and the normalised statement back from a schema.
#include <fmt/format.h>

#include <algorithm>

#include "engine/definitions/compiler.h"
#include "engine/definitions/lexer.h"
#include "engine/definitions/numeric.h"

namespace tally::definitions {

namespace {

// PostgreSQL's limit of columns in a table.
constexpr size_t kMaxSourceColumns = 1600;

// The tally column of a CREATE SOURCE column, or an error at its type.
Result<SourceSchema::Column> ColumnType(const CreateSource::Column& column) {
  struct Spelling {
    std::string_view name;
    Type type;
    enum class Args : uint8_t { kNone, kLength, kPrecision, kNumeric, kFloat } args;
  };
  using Args = Spelling::Args;
  static constexpr Spelling kSpellings[] = {
      {"bigint", Type::kInt64, Args::kNone},
      {"int8", Type::kInt64, Args::kNone},
      {"integer", Type::kInt64, Args::kNone},
      {"int", Type::kInt64, Args::kNone},
      {"int4", Type::kInt64, Args::kNone},
      {"smallint", Type::kInt64, Args::kNone},
      {"int2", Type::kInt64, Args::kNone},
      {"boolean", Type::kBool, Args::kNone},
      {"bool", Type::kBool, Args::kNone},
      {"text", Type::kText, Args::kNone},
      {"varchar", Type::kText, Args::kLength},
      {"character varying", Type::kText, Args::kLength},
      {"timestamp", Type::kTimestamp, Args::kPrecision},
      {"timestamp without time zone", Type::kTimestamp, Args::kPrecision},
      {"timestamptz", Type::kTimestamp, Args::kPrecision},
      {"timestamp with time zone", Type::kTimestamp, Args::kPrecision},
      {"numeric", Type::kNumeric, Args::kNumeric},
      {"decimal", Type::kNumeric, Args::kNumeric},
      {"real", Type::kFloat, Args::kNone},
      {"float4", Type::kFloat, Args::kNone},
      {"double precision", Type::kFloat, Args::kNone},
      {"float8", Type::kFloat, Args::kNone},
      {"float", Type::kFloat, Args::kFloat},
  };
  const auto* found = std::find_if(std::begin(kSpellings), std::end(kSpellings),
                                   [&](const Spelling& s) { return s.name == column.type_name; });
  if (found == std::end(kSpellings)) {
    return ErrorAt(column.type_pos,
                   fmt::format("type \"{}\" is not supported: a source column is bigint, "
                               "integer, smallint, boolean, text, varchar, timestamp (with or "
                               "without time zone), numeric(p,s), real or double precision",
                               column.type_name));
  }
  const std::vector<int64_t>& args = column.type_args;
  SourceSchema::Column out{column.name, found->type};
  if (found->args == Args::kNumeric) {
    // numeric(p) is numeric(p,0); a bare numeric has no scale for its sums to keep.
    if (args.empty()) {
      return ErrorAt(column.type_pos,
                     fmt::format("{0} needs a scale: declare {0}(precision, scale), e.g. "
                                 "{0}(12,2); tally keeps its sums exact in that scale",
                                 found->name));
    }
    if (args.size() > 2) return ErrorAt(column.type_pos, "invalid NUMERIC type modifier");
    if (args[0] < 1 || args[0] > 1000) {
      return ErrorAt(column.type_pos,
                     fmt::format("NUMERIC precision {} must be between 1 and 1000", args[0]));
    }
    const int64_t scale = args.size() == 2 ? args[1] : 0;
    if (scale < 0 || scale > kMaxScale) {
      return ErrorAt(column.type_pos,
                     fmt::format("NUMERIC scale {} is not supported: tally keeps 0 to {} digits "
                                 "after the point",
                                 scale, kMaxScale));
    }
    out.precision = static_cast<int>(args[0]);
    out.scale = static_cast<int>(scale);
    return out;
  }
  if (args.empty()) return out;
  switch (found->args) {
    case Args::kNone:
      return ErrorAt(column.type_pos,
                     fmt::format("type modifier is not allowed for type \"{}\"", found->name));
    case Args::kLength:
      if (args.size() != 1) return ErrorAt(column.type_pos, "invalid type modifier");
      if (args[0] < 1) {
        return ErrorAt(column.type_pos, "length for type varchar must be at least 1");
      }
      return out;
    case Args::kPrecision:
      if (args.size() != 1) return ErrorAt(column.type_pos, "invalid type modifier");
      if (args[0] > 6) {
        return ErrorAt(column.type_pos,
                       fmt::format("TIMESTAMP({}) precision must be between 0 and 6", args[0]));
      }
      return out;
    case Args::kFloat:
      if (args.size() != 1) return ErrorAt(column.type_pos, "invalid type modifier");
      if (args[0] < 1 || args[0] > 53) {
        return ErrorAt(column.type_pos, "precision for type float must be between 1 and 53");
      }
      return out;
    case Args::kNumeric:
      break;
  }
  return out;
}

// The canonical PostgreSQL type of `column`.
std::string SqlTypeName(const SourceSchema::Column& column) {
  switch (column.type) {
    case Type::kInt64:
      return "bigint";
    case Type::kBool:
      return "boolean";
    case Type::kText:
      return "text";
    case Type::kTimestamp:
      return "timestamp";
    case Type::kNumeric:
      return fmt::format("numeric({},{})", column.precision, column.scale);
    case Type::kFloat:
      return "double precision";
    case Type::kNull:
      break;
  }
  return "unknown";
}

}  // namespace

Result<SourceSchema> CompileSource(const CreateSource& create) {
  if (create.name.find_first_of(":\\") != std::string::npos) {
    return ErrorAt(create.name_pos, "a source name cannot contain ':' or '\\'");
  }
  if (create.columns.empty()) return ErrorAt(create.name_pos, "a source needs at least one column");
  if (create.columns.size() > kMaxSourceColumns) {
    return ErrorAt(create.columns[kMaxSourceColumns].pos,
                   fmt::format("a source has at most {} columns", kMaxSourceColumns));
  }
  SourceSchema schema;
  schema.name = create.name;
  for (const CreateSource::Column& column : create.columns) {
    if (column.name.find_first_of(":\\") != std::string::npos) {
      return ErrorAt(column.pos, "a column name cannot contain ':' or '\\'");
    }
    for (const SourceSchema::Column& before : schema.columns) {
      if (before.name == column.name) {
        return ErrorAt(column.pos,
                       fmt::format("column \"{}\" specified more than once", column.name));
      }
    }
    auto typed = ColumnType(column);
    if (!typed) return tl::unexpected(typed.error());
    schema.columns.push_back(std::move(*typed));
  }
  return schema;
}

std::string SourceSql(const SourceSchema& schema) {
  std::string out = fmt::format("CREATE SOURCE {} (", QuoteIdentifier(schema.name));
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const SourceSchema::Column& column = schema.columns[i];
    out += fmt::format("{}{} {}", i > 0 ? ", " : "", QuoteIdentifier(column.name),
                       SqlTypeName(column));
  }
  out.push_back(')');
  return out;
}

}  // namespace tally::definitions
