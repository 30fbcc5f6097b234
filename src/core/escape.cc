#include "core/escape.h"

#include "core/utf8.h"

namespace tally {

void AppendPrintable(std::string_view bytes, KeepUtf8 keep_utf8, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->reserve(out->size() + bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    if (byte >= 0x20 && byte < 0x7F && byte != '\\') {
      out->push_back(static_cast<char>(byte));
      continue;
    }
    if (byte >= 0x80 && keep_utf8 == KeepUtf8::kYes) {
      if (const size_t length = Utf8MultiByteLength(bytes, i); length != 0) {
        out->append(bytes.substr(i, length));
        i += length - 1;
        continue;
      }
    }
    out->append("\\x");
    out->push_back(kHex[byte >> 4]);
    out->push_back(kHex[byte & 0xF]);
  }
}

}  // namespace tally
