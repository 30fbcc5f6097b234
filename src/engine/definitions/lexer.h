// The lexer of the definition language: SQL text to tokens with their line and column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tally::definitions {

// A place in the source text; both 1-based, columns counted in characters (UTF-8 code
// points), so that an error points where an editor shows the cursor.
struct Position {
  int line = 1;
  int column = 1;
};

// "line 3, column 14: <message>" as an InvalidArgument error: the one spelling of every
// error of the front end.
tl::unexpected<Error> ErrorAt(Position pos, std::string_view message);

enum class TokenKind : uint8_t {
  kIdentifier,  // unquoted (folded to lower case, as PostgreSQL does) or "quoted" (as is)
  kInteger,     // digits only; the parser checks the range
  kDecimal,     // digits with a '.' or an exponent: recognised only to be refused
  kString,      // 'text' with '' for a quote, already unescaped
  kOperator,    // ( ) , ; . * + - / % = <> != < <= > >= ::
  kEnd,         // end of input
};

// One token. `text` is the folded identifier, the digits, the unescaped string or the
// operator's spelling.
struct Token {
  TokenKind kind;
  std::string text;
  std::string raw;  // the token as written, for messages
  Position pos;
  bool quoted = false;  // a "quoted identifier": never a keyword

  // True for an unquoted identifier spelled `keyword` (lower case).
  bool Is(std::string_view keyword) const {
    return kind == TokenKind::kIdentifier && !quoted && text == keyword;
  }
  // True for the operator `op`.
  bool IsOp(std::string_view op) const { return kind == TokenKind::kOperator && text == op; }
};

// Splits `sql` into tokens, the last one kEnd. Skips white space, "-- line" and
// "/* block */" comments (nested, as in PostgreSQL). Fails on an unterminated string,
// quoted identifier or comment, and on a character outside the language.
Result<std::vector<Token>> Tokenize(std::string_view sql);

// True for a word that cannot name a column, alias, source or counter unless "quoted".
bool IsReservedWord(std::string_view word);

// `name` as a PostgreSQL identifier: as is when it needs no quotes, else "quoted".
std::string QuoteIdentifier(std::string_view name);

// How a token reads in an error message: "\"FROM\"" or "end of input".
std::string Describe(const Token& token);

}  // namespace tally::definitions
