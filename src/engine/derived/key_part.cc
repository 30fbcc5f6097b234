#include "engine/derived/key_part.h"

#include <fmt/format.h>

#include <charconv>

#include "core/timestamp.h"
#include "engine/derived/message_text.h"

namespace tally::derived {

using definitions::Type;
using definitions::Value;

namespace {

constexpr std::string_view kTextRule =
    "(text in a key part is spelled as in the key: \\: for ':', \\\\ for '\\', and \\N alone "
    "is NULL)";

// The text a part spells, unescaped into *out.
Status UnescapeText(std::string_view part, std::string* out) {
  out->clear();
  for (size_t at = 0; at < part.size(); ++at) {
    const char c = part[at];
    if (c == ':') {
      return InvalidArgument(fmt::format("':' at byte {} must be written \\: {}", at, kTextRule));
    }
    if (c == '\\') {
      if (at + 1 == part.size() || (part[at + 1] != '\\' && part[at + 1] != ':')) {
        return InvalidArgument(
            fmt::format("'\\' at byte {} must be written \\\\ {}", at, kTextRule));
      }
      ++at;
    }
    out->push_back(part[at]);
  }
  return OkStatus();
}

}  // namespace

Result<Value> ParseKeyPart(Type type, std::string_view text, std::string* storage) {
  if (text == "\\N") return Value::Null();
  switch (type) {
    case Type::kInt64: {
      int64_t value = 0;
      const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
      if (result.ec == std::errc::result_out_of_range && result.ptr == text.data() + text.size()) {
        return InvalidArgument(fmt::format("{} is out of the int64 range", Quoted(text)));
      }
      if (text.empty() || result.ec != std::errc() || result.ptr != text.data() + text.size()) {
        return InvalidArgument(fmt::format("{} is not an int64", Quoted(text)));
      }
      return Value::Int(value);
    }
    case Type::kBool:
      if (text == "true") return Value::Bool(true);
      if (text == "false") return Value::Bool(false);
      return InvalidArgument(fmt::format("{} is not a bool (true or false)", Quoted(text)));
    case Type::kText:
      // Text without escapes (the usual case) is its own value: no copy.
      if (text.find_first_of("\\:") == std::string_view::npos) return Value::Text(text);
      if (auto status = UnescapeText(text, storage); !status) return tl::unexpected(status.error());
      return Value::Text(*storage);
    case Type::kTimestamp: {
      const Result<int64_t> micros = ParseTimestamp(text);
      if (!micros) {
        return InvalidArgument(fmt::format(
            "{} is not a timestamp (2024-05-01T13:45:00Z or 20240501T134500Z)", Quoted(text)));
      }
      return Value::Timestamp(*micros);
    }
    case Type::kNumeric:  // never a key column (the compiler refuses it)
    case Type::kFloat:
    case Type::kNull:
      break;
  }
  return InvalidArgument(fmt::format("{} is not NULL (\\N)", Quoted(text)));
}

}  // namespace tally::derived
