// UTF-8 well-formedness (RFC 3629; table 3-7 of the Unicode standard): no overlong forms,
// no surrogates U+D800..U+DFFF, nothing past U+10FFFF. One place for every writer that
// passes valid UTF-8 through and escapes the rest (JSON, Prometheus labels, INFO).
#pragma once

#include <cstddef>
#include <string_view>

namespace tally {

// The length (2 to 4) of the well-formed UTF-8 sequence of two or more bytes that starts
// at text[i], or 0 when there is none there (an ASCII byte, a stray continuation byte, a
// sequence cut short or ill-formed). REQUIRES: i < text.size().
inline size_t Utf8MultiByteLength(std::string_view text, size_t i) {
  const auto at = [&](size_t k) -> unsigned char {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
  };
  const unsigned char lead = at(0);
  // The second byte's range depends on the lead: it is what excludes overlong forms,
  // surrogates and code points past U+10FFFF. Later bytes are any continuation byte.
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  size_t length = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (at(1) < low || at(1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if ((at(k) & 0xC0) != 0x80) return 0;
  }
  return length;
}

// Whether all of `text` is well-formed UTF-8 (ASCII included).
inline bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t length = Utf8MultiByteLength(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

}  // namespace tally
