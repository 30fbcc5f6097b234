#include "engine/derived/message_text.h"

#include <fmt/format.h>

namespace tally::derived {

namespace {

// The bytes of `text` a message shows: all of it, or the first kShownBytes cut back to a
// UTF-8 boundary.
std::string_view ShownPart(std::string_view text) {
  if (text.size() <= kShownBytes) return text;
  size_t shown = kShownBytes;
  while (shown > 0 && (static_cast<unsigned char>(text[shown]) & 0xC0) == 0x80) --shown;
  return text.substr(0, shown);
}

}  // namespace

std::string Quoted(std::string_view text) {
  const std::string_view shown = ShownPart(text);
  std::string out = "\"";
  for (const char c : shown) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  if (shown.size() < text.size()) out += "...";
  out.push_back('"');
  return out;
}

std::string Shown(std::string_view text) {
  const std::string_view shown = ShownPart(text);
  std::string out(shown);
  if (shown.size() < text.size()) out += "...";
  return out;
}

}  // namespace tally::derived
