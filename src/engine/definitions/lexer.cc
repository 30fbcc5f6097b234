#include "engine/definitions/lexer.h"

#include <fmt/format.h>

#include <algorithm>

namespace tally::definitions {

tl::unexpected<Error> ErrorAt(Position pos, std::string_view message) {
  return InvalidArgument(fmt::format("line {}, column {}: {}", pos.line, pos.column, message));
}

std::string Describe(const Token& token) {
  if (token.kind == TokenKind::kEnd) return "end of input";
  if (token.kind == TokenKind::kString || token.quoted) return token.raw;
  return fmt::format("\"{}\"", token.raw);
}

bool IsReservedWord(std::string_view word) {
  // PostgreSQL reserves these too, so a definition accepted here stays valid PostgreSQL.
  static constexpr std::string_view kReserved[] = {
      "all",    "and",      "any",   "as",     "between", "case",    "cast",   "create",
      "cross",  "distinct", "else",  "end",    "except",  "exists",  "false",  "fetch",
      "from",   "full",     "group", "having", "ilike",   "in",      "inner",  "intersect",
      "is",     "join",     "left",  "like",   "limit",   "natural", "not",    "null",
      "offset", "on",       "or",    "order",  "over",    "right",   "select", "similar",
      "then",   "true",     "union", "using",  "when",    "where",   "window", "with"};
  return std::ranges::find(kReserved, word) != std::end(kReserved);
}

std::string QuoteIdentifier(std::string_view name) {
  bool plain = !name.empty() && !IsReservedWord(name) && !(name[0] >= '0' && name[0] <= '9');
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) plain = false;
  }
  if (plain) return std::string(name);
  std::string out = "\"";
  for (const char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

namespace {

bool IsIdentStart(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}
bool IsIdentChar(unsigned char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Walks the text keeping the line and column of the next byte.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}

  bool done() const { return at_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return at_ + ahead < text_.size() ? text_[at_ + ahead] : '\0';
  }
  Position pos() const { return pos_; }
  size_t offset() const { return at_; }

  char next() {
    const char c = text_[at_++];
    if (c == '\n') {
      ++pos_.line;
      pos_.column = 1;
    } else if (at_ >= text_.size() || (static_cast<unsigned char>(text_[at_]) & 0xC0) != 0x80) {
      // The bytes of one UTF-8 code point share a column: it advances after the last one.
      ++pos_.column;
    }
    return c;
  }

 private:
  std::string_view text_;
  size_t at_ = 0;
  Position pos_;
};

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view sql) {
  std::vector<Token> tokens;
  Cursor in(sql);
  while (true) {
    // White space and comments.
    while (!in.done()) {
      const char c = in.peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        in.next();
      } else if (c == '-' && in.peek(1) == '-') {
        while (!in.done() && in.peek() != '\n') in.next();
      } else if (c == '/' && in.peek(1) == '*') {
        const Position start = in.pos();
        int depth = 0;
        do {
          if (in.done()) return ErrorAt(start, "unterminated /* comment");
          if (in.peek() == '/' && in.peek(1) == '*') {
            ++depth;
            in.next();
          } else if (in.peek() == '*' && in.peek(1) == '/') {
            --depth;
            in.next();
          }
          in.next();
        } while (depth > 0);
      } else {
        break;
      }
    }
    Token token{TokenKind::kEnd, "", "", in.pos()};
    const size_t start = in.offset();
    if (in.done()) {
      tokens.push_back(std::move(token));
      return tokens;
    }
    const char c = in.peek();
    if (IsIdentStart(static_cast<unsigned char>(c))) {
      token.kind = TokenKind::kIdentifier;
      while (!in.done() && IsIdentChar(static_cast<unsigned char>(in.peek()))) {
        char ch = in.next();
        if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
        token.text.push_back(ch);
      }
    } else if (IsDigit(c) || (c == '.' && IsDigit(in.peek(1)))) {
      token.kind = TokenKind::kInteger;
      while (IsDigit(in.peek())) token.text.push_back(in.next());
      if (in.peek() == '.' || in.peek() == 'e' || in.peek() == 'E') {
        token.kind = TokenKind::kDecimal;
        while (IsDigit(in.peek()) || in.peek() == '.' || in.peek() == 'e' || in.peek() == 'E') {
          token.text.push_back(in.next());
        }
      }
      if (IsIdentStart(static_cast<unsigned char>(in.peek()))) {
        return ErrorAt(in.pos(),
                       fmt::format("trailing junk after numeric literal \"{}\"", token.text));
      }
    } else if (c == '\'' || c == '"') {
      const char quote = c;
      token.kind = quote == '\'' ? TokenKind::kString : TokenKind::kIdentifier;
      token.quoted = quote == '"';
      in.next();
      while (true) {
        if (in.done()) {
          return ErrorAt(token.pos, quote == '\'' ? "unterminated quoted string"
                                                  : "unterminated quoted identifier");
        }
        const char ch = in.next();
        if (ch == quote) {
          if (in.peek() != quote) break;
          in.next();
        }
        token.text.push_back(ch);
      }
      if (token.quoted && token.text.empty()) {
        return ErrorAt(token.pos, "zero-length delimited identifier");
      }
    } else {
      token.kind = TokenKind::kOperator;
      static constexpr std::string_view kTwo[] = {"<>", "!=", "<=", ">=", "::"};
      for (const std::string_view op : kTwo) {
        if (c == op[0] && in.peek(1) == op[1]) token.text = op;
      }
      if (token.text.empty() &&
          std::string_view("(),;.*+-/%=<>").find(c) != std::string_view::npos) {
        token.text = std::string(1, c);
      }
      if (token.text.empty()) {
        return ErrorAt(in.pos(), fmt::format("unexpected character \"{}\"", c));
      }
      for (size_t i = 0; i < token.text.size(); ++i) in.next();
    }
    token.raw = std::string(sql.substr(start, in.offset() - start));
    tokens.push_back(std::move(token));
  }
}

}  // namespace tally::definitions
