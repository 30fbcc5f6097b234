#include "engine/definitions/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace tally::definitions {
namespace {

bool IsReserved(const Token& token) {
  return token.kind == TokenKind::kIdentifier && !token.quoted && IsReservedWord(token.text);
}

// The value of an integer literal of decimal `digits` (leading zeros allowed, as in SQL),
// negated when `negative`; nullopt outside int64.
std::optional<int64_t> IntegerLiteral(std::string_view digits, bool negative) {
  uint64_t magnitude = 0;
  for (const char c : digits) {
    const auto digit = static_cast<uint64_t>(c - '0');
    if (magnitude > (UINT64_MAX - digit) / 10) return std::nullopt;
    magnitude = magnitude * 10 + digit;
  }
  const uint64_t limit = static_cast<uint64_t>(INT64_MAX) + (negative ? 1 : 0);
  if (magnitude > limit) return std::nullopt;
  return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

// Upper-case spelling of a keyword for messages.
std::string Upper(std::string_view word) {
  std::string out(word);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

// Recursive descent over the token vector; one method per grammar rule.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<std::vector<Statement>> Script() {
    std::vector<Statement> out;
    while (true) {
      while (Peek().IsOp(";")) Advance();
      if (Peek().kind == TokenKind::kEnd) return out;
      auto statement = ParseOne();
      if (!statement) return tl::unexpected(statement.error());
      out.push_back(std::move(*statement));
      if (Peek().IsOp(";")) continue;
      if (Peek().kind != TokenKind::kEnd) return SyntaxError(Peek());
    }
  }

  Result<Statement> Single() {
    auto statement = ParseOne();
    if (!statement) return statement;
    if (Peek().IsOp(";")) Advance();
    if (Peek().kind != TokenKind::kEnd) return SyntaxError(Peek());
    return statement;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(at_ + ahead, tokens_.size() - 1)];
  }
  const Token& Advance() {
    const Token& token = tokens_[at_];
    if (at_ + 1 < tokens_.size()) ++at_;
    return token;
  }
  bool Accept(std::string_view keyword) {
    if (!Peek().Is(keyword)) return false;
    Advance();
    return true;
  }
  bool AcceptOp(std::string_view op) {
    if (!Peek().IsOp(op)) return false;
    Advance();
    return true;
  }

  static tl::unexpected<Error> SyntaxError(const Token& token) {
    return ErrorAt(token.pos, fmt::format("syntax error at or near {}", Describe(token)));
  }
  static tl::unexpected<Error> Expected(const Token& token, std::string_view what) {
    return ErrorAt(token.pos, fmt::format("expected {}, found {}", what, Describe(token)));
  }
  static tl::unexpected<Error> NotSupported(const Token& token, std::string_view what) {
    return NotSupported(token.pos, what);
  }
  static tl::unexpected<Error> NotSupported(Position pos, std::string_view what) {
    return ErrorAt(pos, fmt::format("{} is not supported", what));
  }

  Status ExpectKeyword(std::string_view keyword) {
    if (Accept(keyword)) return OkStatus();
    return Expected(Peek(), Upper(keyword));
  }
  Status ExpectOp(std::string_view op) {
    if (AcceptOp(op)) return OkStatus();
    return Expected(Peek(), fmt::format("\"{}\"", op));
  }

  // A name: an identifier that is not a reserved word.
  Result<Token> Name(std::string_view what) {
    const Token& token = Peek();
    if (token.kind != TokenKind::kIdentifier || IsReserved(token)) return Expected(token, what);
    return Advance();
  }

  Result<Statement> ParseOne() {
    const Token& first = Peek();
    if (Accept("create")) {
      if (Peek().Is("or")) return NotSupported(Peek(), "CREATE OR REPLACE COUNTER");
      if (Accept("source")) return ParseCreateSource();
      if (Peek().Is("table")) {
        return ErrorAt(Peek().pos,
                       "CREATE TABLE is not supported: declare a source's columns with "
                       "CREATE SOURCE name (column type, ...)");
      }
      if (!Accept("counter")) return Expected(Peek(), "COUNTER or SOURCE");
      return ParseCreate();
    }
    if (Accept("drop")) {
      if (Accept("source")) {
        auto name = Name("a source name");
        if (!name) return tl::unexpected(name.error());
        if (name->text == "if" && Peek().Is("exists")) {
          return NotSupported(name->pos, "DROP SOURCE IF EXISTS");
        }
        if (Peek().IsOp(".")) return NotSupported(Peek(), "a qualified source name");
        return DropSource{name->text, name->pos};
      }
      if (!Accept("counter")) return Expected(Peek(), "COUNTER or SOURCE");
      auto name = Name("a counter name");
      if (!name) return tl::unexpected(name.error());
      return DropCounter{name->text, name->pos};
    }
    if (Accept("show")) {
      if (Accept("sources")) return ShowSources{};
      if (!Accept("counters")) return Expected(Peek(), "COUNTERS or SOURCES");
      return ShowCounters{};
    }
    return Expected(first, "CREATE, DROP or SHOW");
  }

  // True for a word that ends a column's type: a column constraint.
  static bool IsConstraintWord(const Token& token) {
    static constexpr std::string_view kWords[] = {
        "not",   "null",    "primary",    "default",   "references", "unique",
        "check", "collate", "constraint", "generated", "deferrable", "initially"};
    return std::ranges::any_of(kWords, [&token](std::string_view word) { return token.Is(word); });
  }

  // CREATE SOURCE, after the two keywords.
  Result<Statement> ParseCreateSource() {
    CreateSource create;
    auto name = Name("a source name");
    if (!name) return tl::unexpected(name.error());
    create.name = name->text;
    create.name_pos = name->pos;
    if (create.name == "if" && Peek().Is("not")) {
      return NotSupported(name->pos, "CREATE SOURCE IF NOT EXISTS");
    }
    if (Peek().IsOp(".")) return NotSupported(Peek(), "a qualified source name");
    if (Peek().Is("as")) {
      return ErrorAt(Peek().pos,
                     "a source lists its columns: CREATE SOURCE name (column type, ...)");
    }
    if (auto s = ExpectOp("("); !s) return tl::unexpected(s.error());
    if (Peek().IsOp(")")) return ErrorAt(Peek().pos, "a source needs at least one column");
    do {
      if (Peek().Is("constraint") || Peek().Is("like") ||
          ((Peek().Is("primary") || Peek().Is("foreign")) && Peek(1).Is("key")) ||
          ((Peek().Is("unique") || Peek().Is("check") || Peek().Is("exclude")) &&
           (Peek(1).IsOp("(") || Peek(1).Is("using")))) {
        return ErrorAt(Peek().pos,
                       "table constraints are not supported: a source lists columns and types");
      }
      auto column = ParseSourceColumn();
      if (!column) return tl::unexpected(column.error());
      create.columns.push_back(std::move(*column));
    } while (AcceptOp(","));
    if (auto s = ExpectOp(")"); !s) return tl::unexpected(s.error());
    return create;
  }

  // column := name type [ NOT NULL | NULL | PRIMARY KEY ]...
  Result<CreateSource::Column> ParseSourceColumn() {
    CreateSource::Column column;
    auto name = Name("a column name");
    if (!name) return tl::unexpected(name.error());
    column.name = name->text;
    column.pos = name->pos;
    column.type_pos = Peek().pos;
    // The type: words, then numbers in parentheses, then more words ("timestamp(3) with
    // time zone"), up to a constraint, ',' or ')'. Which names exist is the compiler's call.
    bool had_args = false;
    while (true) {
      const Token& token = Peek();
      if (token.kind == TokenKind::kIdentifier && !token.quoted && !IsConstraintWord(token)) {
        if (!column.type_name.empty()) column.type_name.push_back(' ');
        column.type_name += Advance().text;
      } else if (token.IsOp("(") && !column.type_name.empty() && !had_args) {
        Advance();
        had_args = true;
        do {
          if (Peek().kind != TokenKind::kInteger) return Expected(Peek(), "an integer");
          auto value = IntegerLiteral(Peek().text, /*negative=*/false);
          if (!value) return Expected(Peek(), "an integer");
          column.type_args.push_back(*value);
          Advance();
        } while (AcceptOp(","));
        if (auto s = ExpectOp(")"); !s) return tl::unexpected(s.error());
      } else {
        break;
      }
    }
    if (column.type_name.empty()) return Expected(Peek(), "a type");
    while (true) {
      if (Accept("null")) continue;
      if (Peek().Is("not") && Peek(1).Is("null")) {
        Advance();
        Advance();
        continue;
      }
      if (Peek().Is("primary") && Peek(1).Is("key")) {
        Advance();
        Advance();
        continue;
      }
      if (IsConstraintWord(Peek())) {
        return ErrorAt(Peek().pos,
                       fmt::format("{} is not supported in CREATE SOURCE: a column has a type, "
                                   "and NOT NULL, NULL or PRIMARY KEY (which are ignored)",
                                   Upper(Peek().text)));
      }
      break;
    }
    return column;
  }

  Result<Statement> ParseCreate() {
    CreateCounter create;
    auto name = Name("a counter name");
    if (!name) return tl::unexpected(name.error());
    create.name = name->text;
    create.name_pos = name->pos;
    if (Peek().IsOp(".")) return NotSupported(Peek(), "a qualified counter name");
    if (auto s = ExpectKeyword("as"); !s) return tl::unexpected(s.error());
    if (Peek().Is("with")) return NotSupported(Peek(), "WITH");
    if (auto s = ExpectKeyword("select"); !s) return tl::unexpected(s.error());
    if (Peek().Is("distinct")) return NotSupported(Peek(), "DISTINCT");
    if (Peek().Is("all")) return NotSupported(Peek(), "SELECT ALL");
    do {
      if (Peek().IsOp("*")) {
        return ErrorAt(Peek().pos,
                       "SELECT * is not supported: list the group columns and the aggregates");
      }
      if (Peek().Is("from")) return Expected(Peek(), "a select item");
      SelectItem item;
      item.pos = Peek().pos;
      auto expr = ParseExpr();
      if (!expr) return tl::unexpected(expr.error());
      item.expr = std::move(*expr);
      if (Accept("as")) {
        auto alias = Name("an alias");
        if (!alias) return tl::unexpected(alias.error());
        item.alias = alias->text;
      } else if (Peek().kind == TokenKind::kIdentifier && !IsReserved(Peek())) {
        item.alias = Advance().text;
      }
      create.items.push_back(std::move(item));
    } while (AcceptOp(","));
    if (Peek().Is("into")) return NotSupported(Peek(), "SELECT INTO");
    if (auto s = ExpectKeyword("from"); !s) return tl::unexpected(s.error());
    if (Peek().IsOp("(")) return NotSupported(Peek(), "a subquery");
    auto source = Name("a source name");
    if (!source) return tl::unexpected(source.error());
    create.source = source->text;
    create.source_pos = source->pos;
    if (Peek().IsOp(".")) return NotSupported(Peek(), "a qualified source name");
    if (Peek().IsOp(",") || Peek().Is("join") || Peek().Is("inner") || Peek().Is("left") ||
        Peek().Is("right") || Peek().Is("full") || Peek().Is("cross") || Peek().Is("natural")) {
      return ErrorAt(Peek().pos, "joins are not supported: a counter reads exactly one source");
    }
    if (Peek().Is("as") || (Peek().kind == TokenKind::kIdentifier && !IsReserved(Peek()))) {
      return NotSupported(Peek(), "a table alias");
    }
    if (Accept("where")) {
      auto where = ParseExpr();
      if (!where) return tl::unexpected(where.error());
      create.where = std::move(*where);
    }
    if (Accept("group")) {
      if (auto s = ExpectKeyword("by"); !s) return tl::unexpected(s.error());
      create.has_group_by = true;
      do {
        auto expr = ParseExpr();
        if (!expr) return tl::unexpected(expr.error());
        create.group_by.push_back(std::move(*expr));
      } while (AcceptOp(","));
    }
    for (const std::string_view clause : {"having", "order", "limit", "offset", "fetch", "union",
                                          "intersect", "except", "window", "where", "group"}) {
      if (Peek().Is(clause)) {
        if (clause == "where" || clause == "group") {
          return ErrorAt(Peek().pos, fmt::format("{} must come before GROUP BY", Upper(clause)));
        }
        return NotSupported(Peek(), clause == "order" ? "ORDER BY" : Upper(clause));
      }
    }
    if (Peek().Is("with")) {
      create.with_pos = Advance().pos;
      if (auto s = ParseOptions(create.options); !s) return tl::unexpected(s.error());
      if (Peek().Is("where") || Peek().Is("group")) {
        return ErrorAt(Peek().pos, fmt::format("{} must come before WITH",
                                               Peek().Is("where") ? "WHERE" : "GROUP BY"));
      }
    }
    return create;
  }

  // ( name = 'value' ( , name = 'value' )* ), after WITH.
  Status ParseOptions(std::vector<CounterOption>& options) {
    if (auto s = ExpectOp("("); !s) return s;
    do {
      auto name = Name("an option name");
      if (!name) return tl::unexpected(name.error());
      if (auto s = ExpectOp("="); !s) return s;
      if (Peek().kind != TokenKind::kString) {
        return Expected(Peek(), "a quoted option value, such as '30 days'");
      }
      const Token& value = Advance();
      options.push_back(CounterOption{name->text, value.text, name->pos, value.pos});
    } while (AcceptOp(","));
    return ExpectOp(")");
  }

  // expr := or
  Result<ExprPtr> ParseExpr() {
    // Parentheses, CASE and calls recurse through here: bound the parser's own depth.
    if (nesting_ >= kMaxDepth) return TooDeep(Peek().pos);
    ++nesting_;
    auto expr = ParseOr();
    --nesting_;
    return expr;
  }

  static ExprPtr Node(ExprKind kind, Position pos) {
    auto node = std::make_unique<Expr>();
    node->kind = kind;
    node->pos = pos;
    return node;
  }
  static Result<ExprPtr> Binary(std::string op, Position pos, ExprPtr left, ExprPtr right) {
    ExprPtr node = Node(ExprKind::kBinary, pos);
    node->op = std::move(op);
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    return Sealed(std::move(node));
  }

  // Sets the depth of `node` from its children's. Fails past kMaxDepth: the compiler walks
  // trees recursively, and a hostile definition must not overflow the stack.
  static Result<ExprPtr> Sealed(ExprPtr node) {
    for (const ExprPtr& arg : node->args) node->depth = std::max(node->depth, arg->depth + 1);
    if (node->depth > kMaxDepth) return TooDeep(node->pos);
    return node;
  }
  static tl::unexpected<Error> TooDeep(Position pos) {
    return ErrorAt(pos, fmt::format("expression nested too deeply (over {} levels)", kMaxDepth));
  }

  Result<ExprPtr> ParseOr() {
    auto left = ParseAnd();
    if (!left) return left;
    while (Peek().Is("or")) {
      const Position pos = Advance().pos;
      auto right = ParseAnd();
      if (!right) return right;
      left = Binary("OR", pos, std::move(*left), std::move(*right));
      if (!left) return left;
    }
    return left;
  }

  Result<ExprPtr> ParseAnd() {
    auto left = ParseNot();
    if (!left) return left;
    while (Peek().Is("and")) {
      const Position pos = Advance().pos;
      auto right = ParseNot();
      if (!right) return right;
      left = Binary("AND", pos, std::move(*left), std::move(*right));
      if (!left) return left;
    }
    return left;
  }

  Result<ExprPtr> ParseNot() {
    if (Peek().Is("not")) {
      const Position pos = Advance().pos;
      if (++nesting_ > kMaxDepth) return TooDeep(pos);
      auto operand = ParseNot();
      --nesting_;
      if (!operand) return operand;
      ExprPtr node = Node(ExprKind::kUnary, pos);
      node->op = "NOT";
      node->args.push_back(std::move(*operand));
      return Sealed(std::move(node));
    }
    return ParseIs();
  }

  Result<ExprPtr> ParseIs() {
    auto left = ParseComparison();
    if (!left) return left;
    while (Peek().Is("is")) {
      const Position pos = Advance().pos;
      const bool negated = Accept("not");
      if (Peek().Is("true") || Peek().Is("false") || Peek().Is("unknown") ||
          Peek().Is("distinct")) {
        const std::string what = Peek().Is("distinct") ? "DISTINCT FROM" : Upper(Peek().text);
        return NotSupported(Peek(), fmt::format("IS {}{}", negated ? "NOT " : "", what));
      }
      if (auto s = ExpectKeyword("null"); !s) return tl::unexpected(s.error());
      ExprPtr node = Node(ExprKind::kIsNull, pos);
      node->negated = negated;
      node->args.push_back(std::move(*left));
      left = Sealed(std::move(node));
      if (!left) return left;
    }
    return left;
  }

  static bool IsComparison(const Token& token) {
    static constexpr std::string_view kOps[] = {"=", "<>", "!=", "<", "<=", ">", ">="};
    return std::ranges::any_of(kOps, [&token](std::string_view op) { return token.IsOp(op); });
  }

  Result<ExprPtr> ParseComparison() {
    auto left = ParseBetweenIn();
    if (!left) return left;
    if (IsComparison(Peek())) {
      const Token& op = Advance();
      std::string spelling = op.text == "!=" ? "<>" : op.text;
      const Position pos = op.pos;
      auto right = ParseBetweenIn();
      if (!right) return right;
      if (IsComparison(Peek())) return SyntaxError(Peek());
      left = Binary(std::move(spelling), pos, std::move(*left), std::move(*right));
      if (!left) return left;
    }
    return left;
  }

  Result<ExprPtr> ParseBetweenIn() {
    auto left = ParseAdditive();
    if (!left) return left;
    while (true) {
      const bool negated =
          Peek().Is("not") && (Peek(1).Is("between") || Peek(1).Is("in") || Peek(1).Is("like") ||
                               Peek(1).Is("ilike") || Peek(1).Is("similar"));
      const Token& op = Peek(negated ? 1 : 0);
      if (op.Is("like") || op.Is("ilike") || op.Is("similar")) {
        return NotSupported(op, Upper(op.text));
      }
      if (op.Is("between")) {
        if (negated) Advance();
        const Position pos = Advance().pos;
        if (Peek().Is("symmetric") || Peek().Is("asymmetric")) {
          return NotSupported(Peek(), fmt::format("BETWEEN {}", Upper(Peek().text)));
        }
        auto low = ParseAdditive();
        if (!low) return low;
        if (auto s = ExpectKeyword("and"); !s) return tl::unexpected(s.error());
        auto high = ParseAdditive();
        if (!high) return high;
        ExprPtr node = Node(ExprKind::kBetween, pos);
        node->negated = negated;
        node->args.push_back(std::move(*left));
        node->args.push_back(std::move(*low));
        node->args.push_back(std::move(*high));
        left = Sealed(std::move(node));
        if (!left) return left;
      } else if (op.Is("in")) {
        if (negated) Advance();
        const Position pos = Advance().pos;
        if (auto s = ExpectOp("("); !s) return tl::unexpected(s.error());
        if (Peek().Is("select")) return NotSupported(Peek(), "a subquery");
        ExprPtr node = Node(ExprKind::kIn, pos);
        node->negated = negated;
        node->args.push_back(std::move(*left));
        do {
          auto item = ParseExpr();
          if (!item) return item;
          node->args.push_back(std::move(*item));
        } while (AcceptOp(","));
        if (auto s = ExpectOp(")"); !s) return tl::unexpected(s.error());
        left = Sealed(std::move(node));
        if (!left) return left;
      } else {
        return left;
      }
    }
  }

  Result<ExprPtr> ParseAdditive() {
    auto left = ParseMultiplicative();
    if (!left) return left;
    while (Peek().IsOp("+") || Peek().IsOp("-")) {
      const Token& op = Advance();
      std::string spelling = op.text;
      const Position pos = op.pos;
      auto right = ParseMultiplicative();
      if (!right) return right;
      left = Binary(std::move(spelling), pos, std::move(*left), std::move(*right));
      if (!left) return left;
    }
    return left;
  }

  Result<ExprPtr> ParseMultiplicative() {
    auto left = ParseUnary();
    if (!left) return left;
    while (Peek().IsOp("*") || Peek().IsOp("/") || Peek().IsOp("%")) {
      const Token& op = Advance();
      std::string spelling = op.text;
      const Position pos = op.pos;
      auto right = ParseUnary();
      if (!right) return right;
      left = Binary(std::move(spelling), pos, std::move(*left), std::move(*right));
      if (!left) return left;
    }
    return left;
  }

  Result<ExprPtr> ParseUnary() {
    if (Peek().IsOp("-") || Peek().IsOp("+")) {
      const Token& op = Advance();
      const bool minus = op.text == "-";
      const Position pos = op.pos;
      // -9223372036854775808 is one literal, as in PostgreSQL, not minus an out-of-range one.
      if (minus && Peek().kind == TokenKind::kInteger) {
        const Token& digits = Advance();
        auto value = IntegerLiteral(digits.text, /*negative=*/true);
        if (!value) {
          return ErrorAt(pos,
                         fmt::format("integer literal -{} is out of the int64 range", digits.text));
        }
        ExprPtr node = Node(ExprKind::kInteger, pos);
        node->int_value = *value;
        return Postfix(std::move(node));
      }
      if (++nesting_ > kMaxDepth) return TooDeep(pos);
      auto operand = ParseUnary();
      --nesting_;
      if (!operand) return operand;
      if (!minus) return operand;
      ExprPtr node = Node(ExprKind::kUnary, pos);
      node->op.assign(1, '-');
      node->args.push_back(std::move(*operand));
      return Sealed(std::move(node));
    }
    auto primary = ParsePrimary();
    if (!primary) return primary;
    return Postfix(std::move(*primary));
  }

  // Refuses what may follow a primary in PostgreSQL but not here.
  Result<ExprPtr> Postfix(ExprPtr expr) {
    if (Peek().IsOp("::")) return NotSupported(Peek(), "a cast (::)");
    if (Peek().Is("collate")) return NotSupported(Peek(), "COLLATE");
    if (Peek().Is("at")) return NotSupported(Peek(), "AT TIME ZONE");
    return expr;
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& token = Peek();
    switch (token.kind) {
      case TokenKind::kInteger: {
        Advance();
        auto value = IntegerLiteral(token.text, /*negative=*/false);
        if (!value) {
          return ErrorAt(token.pos,
                         fmt::format("integer literal {} is out of the int64 range", token.text));
        }
        ExprPtr node = Node(ExprKind::kInteger, token.pos);
        node->int_value = *value;
        return node;
      }
      case TokenKind::kDecimal: {
        if (token.text.find_first_of("eE") != std::string::npos) {
          return ErrorAt(token.pos, fmt::format("numeric literal {} is not supported: write it "
                                                "without an exponent",
                                                token.text));
        }
        Advance();
        ExprPtr node = Node(ExprKind::kDecimal, token.pos);
        node->text = token.text;
        return node;
      }
      case TokenKind::kString: {
        Advance();
        ExprPtr node = Node(ExprKind::kString, token.pos);
        node->text = token.text;
        return node;
      }
      case TokenKind::kEnd:
        return SyntaxError(token);
      case TokenKind::kOperator:
        if (token.IsOp("(")) {
          Advance();
          if (Peek().Is("select")) return NotSupported(Peek(), "a subquery");
          auto inner = ParseExpr();
          if (!inner) return inner;
          if (Peek().IsOp(",")) return NotSupported(Peek(), "a row constructor");
          if (auto s = ExpectOp(")"); !s) return tl::unexpected(s.error());
          return inner;
        }
        return SyntaxError(token);
      case TokenKind::kIdentifier:
        break;
    }
    if (token.Is("true") || token.Is("false")) {
      Advance();
      ExprPtr node = Node(ExprKind::kBool, token.pos);
      node->int_value = token.text == "true" ? 1 : 0;
      return node;
    }
    if (token.Is("null")) {
      Advance();
      return Node(ExprKind::kNull, token.pos);
    }
    if (token.Is("case")) return ParseCase();
    if (token.Is("exists")) return NotSupported(token, "a subquery (EXISTS)");
    if (token.Is("cast")) return NotSupported(token, "CAST");
    if (token.Is("interval") && Peek(1).kind == TokenKind::kString) {
      return NotSupported(token, "INTERVAL");
    }
    if ((token.Is("timestamp") || token.Is("date")) && Peek(1).kind == TokenKind::kString) {
      return NotSupported(token, fmt::format("a {} literal", Upper(token.text)));
    }
    if (IsReserved(token)) return SyntaxError(token);
    Advance();
    if (Peek().IsOp("(")) return ParseCall(token);
    ExprPtr node = Node(ExprKind::kColumn, token.pos);
    node->name = token.text;
    if (AcceptOp(".")) {
      if (Peek().IsOp("*")) return NotSupported(Peek(), fmt::format("{}.*", token.text));
      auto column = Name("a column name");
      if (!column) return tl::unexpected(column.error());
      if (Peek().IsOp(".")) return NotSupported(Peek(), "a qualified name with three parts");
      node->qualifier = token.text;
      node->name = column->text;
    }
    return node;
  }

  Result<ExprPtr> ParseCall(const Token& name) {
    Advance();  // (
    ExprPtr node = Node(ExprKind::kFunction, name.pos);
    node->name = name.text;
    if (Peek().Is("distinct")) {
      if (name.text != "count") {
        return ErrorAt(Peek().pos, fmt::format("{}(DISTINCT ...) is not supported: DISTINCT "
                                               "is for count(DISTINCT x) only",
                                               name.text));
      }
      Advance();
      node->distinct = true;
      if (Peek().IsOp("*") || Peek().IsOp(")")) return Expected(Peek(), "an expression");
    }
    if (Peek().Is("all")) return NotSupported(Peek(), fmt::format("{}(ALL ...)", name.text));
    if (Peek().IsOp("*")) {
      Advance();
      node->star = true;
    } else if (!Peek().IsOp(")")) {
      do {
        auto arg = ParseExpr();
        if (!arg) return arg;
        node->args.push_back(std::move(*arg));
      } while (AcceptOp(","));
      if (Peek().Is("order")) return NotSupported(Peek(), "ORDER BY in an aggregate");
    }
    if (auto s = ExpectOp(")"); !s) return tl::unexpected(s.error());
    if (Peek().Is("filter")) {
      return ErrorAt(Peek().pos, "FILTER is not supported: put the condition in WHERE");
    }
    if (Peek().Is("over")) return NotSupported(Peek(), "a window function (OVER)");
    if (Peek().Is("within")) return NotSupported(Peek(), "WITHIN GROUP");
    return Sealed(std::move(node));
  }

  Result<ExprPtr> ParseCase() {
    ExprPtr node = Node(ExprKind::kCase, Advance().pos);
    if (!Peek().Is("when")) {
      auto operand = ParseExpr();
      if (!operand) return operand;
      node->has_operand = true;
      node->args.push_back(std::move(*operand));
    }
    if (!Peek().Is("when")) return Expected(Peek(), "WHEN");
    while (Accept("when")) {
      auto condition = ParseExpr();
      if (!condition) return condition;
      if (auto s = ExpectKeyword("then"); !s) return tl::unexpected(s.error());
      auto result = ParseExpr();
      if (!result) return result;
      node->args.push_back(std::move(*condition));
      node->args.push_back(std::move(*result));
    }
    if (Accept("else")) {
      auto otherwise = ParseExpr();
      if (!otherwise) return otherwise;
      node->has_else = true;
      node->args.push_back(std::move(*otherwise));
    }
    if (auto s = ExpectKeyword("end"); !s) return tl::unexpected(s.error());
    return Sealed(std::move(node));
  }

  // The deepest expression tree accepted, and so the deepest recursion of the parser and
  // of the compiler's passes; far beyond any real definition.
  static constexpr int kMaxDepth = 128;

  std::vector<Token> tokens_;
  size_t at_ = 0;
  int nesting_ = 0;  // ParseExpr, NOT and unary minus recursions in progress
};

}  // namespace

Result<std::vector<Statement>> ParseScript(std::string_view sql) {
  auto tokens = Tokenize(sql);
  if (!tokens) return tl::unexpected(tokens.error());
  return Parser(std::move(*tokens)).Script();
}

Result<Statement> ParseStatement(std::string_view sql) {
  auto tokens = Tokenize(sql);
  if (!tokens) return tl::unexpected(tokens.error());
  return Parser(std::move(*tokens)).Single();
}

}  // namespace tally::definitions
