// Binary-safe text for humans and line-oriented formats: counter keys may hold any bytes,
// and wherever one is shown (INFO hotkeys, /metrics labels) two different keys must never
// look the same.
#pragma once

#include <string>
#include <string_view>

namespace tally {

enum class KeepUtf8 { kNo, kYes };

// Appends `bytes` to `out` with printable ASCII (0x20..0x7E) other than `\` as is, and
// every other byte as the four characters \xNN (lowercase hex) — `\` itself as \x5c, so
// that the text is unambiguous: the byte 0x80 gives \x80, the text "\x80" gives \x5cx80.
// With KeepUtf8::kYes, well-formed multi-byte UTF-8 sequences (core/utf8.h) are kept as
// they are too; bytes of ill-formed ones are escaped one by one.
void AppendPrintable(std::string_view bytes, KeepUtf8 keep_utf8, std::string* out);

}  // namespace tally
