#include "engine/derived/json_scan.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "core/utf8.h"

namespace tally::derived {

namespace {

// The offset of the first byte that is not UTF-8, or nullopt.
std::optional<size_t> FindInvalidUtf8(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    if (static_cast<unsigned char>(text[at]) < 0x80) {
      ++at;
      continue;
    }
    const size_t length = Utf8MultiByteLength(text, at);
    if (length == 0) return at;
    at += length;
  }
  return std::nullopt;
}

// Whether simdjson holds a number that is not an integer: from_chars's verdict, where out
// of range is an overflow (refused) when the number's decimal exponent is positive and an
// underflow to 0 (held) when it is negative. `digits` are the integer and fraction digits.
bool HeldAsDouble(std::string_view number, std::string_view integer_digits,
                  std::string_view fraction_digits, int64_t exponent) {
  double value = 0;
  const auto result = std::from_chars(number.data(), number.data() + number.size(), value);
  if (result.ec != std::errc::result_out_of_range) return true;
  // The decimal exponent of the first significant digit.
  int64_t magnitude = exponent;
  const size_t first = integer_digits.find_first_not_of('0');
  if (first != std::string_view::npos) {
    magnitude += static_cast<int64_t>(integer_digits.size() - first) - 1;
  } else {
    const size_t nonzero = fraction_digits.find_first_not_of('0');
    if (nonzero == std::string_view::npos) return true;  // zero
    magnitude -= static_cast<int64_t>(nonzero) + 1;
  }
  return magnitude < 0;
}

// The scanner: a recursive descent that records the path of the value it is in.
class Scanner {
 public:
  Scanner(std::string_view text, absl::FunctionRef<void(const JsonNumber&)> on_number)
      : text_(text), on_number_(on_number) {}

  std::optional<size_t> Scan() {
    SkipSpace();
    for (uint32_t top = 0; at_ < text_.size(); ++top) {
      path_.assign(1, top);
      if (!ParseValue(0)) return error_;
      SkipSpace();
    }
    return std::nullopt;
  }

 private:
  static constexpr int kMaxDepth = 1024;

  bool Fail(size_t at) {
    error_ = at;
    return false;
  }
  bool At(char c) const { return at_ < text_.size() && text_[at_] == c; }
  bool AtDigit() const { return at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9'; }
  void SkipDigits() {
    while (AtDigit()) ++at_;
  }
  void SkipSpace() {
    while (At(' ') || At('\t') || At('\n') || At('\r')) ++at_;
  }
  // True when a scalar may end here.
  bool AtDelimiter() const {
    return at_ == text_.size() || At(' ') || At('\t') || At('\n') || At('\r') || At(',') ||
           At(']') || At('}');
  }

  bool ParseValue(int depth) {
    if (at_ >= text_.size()) return Fail(at_);
    switch (text_[at_]) {
      case '{':
      case '[':
        return ParseContainer(depth + 1);
      case '"':
        return ParseString();
      case 't':
        return ParseLiteral("true");
      case 'f':
        return ParseLiteral("false");
      case 'n':
        return ParseLiteral("null");
      default:
        if (At('-') || AtDigit()) return ParseNumber();
        return Fail(at_);
    }
  }

  bool ParseContainer(int depth) {
    const bool object = At('{');
    const char close = object ? '}' : ']';
    if (depth > kMaxDepth) return Fail(at_);
    ++at_;
    SkipSpace();
    if (At(close)) {
      ++at_;
      return true;
    }
    path_.push_back(0);
    while (true) {
      if (object) {
        if (!At('"')) return Fail(at_);
        if (!ParseString()) return false;
        SkipSpace();
        if (!At(':')) return Fail(at_);
        ++at_;
        SkipSpace();
      }
      if (!ParseValue(depth)) return false;
      SkipSpace();
      if (At(',')) {
        ++at_;
        SkipSpace();
        ++path_.back();
        continue;
      }
      if (At(close)) {
        ++at_;
        path_.pop_back();
        return true;
      }
      return Fail(at_);
    }
  }

  bool ParseLiteral(std::string_view word) {
    const size_t start = at_;
    if (text_.substr(at_, word.size()) != word) return Fail(start);
    at_ += word.size();
    return AtDelimiter() || Fail(start);
  }

  // Four hex digits at text_[at] into *out.
  bool Hex4(size_t at, unsigned* out) const {
    if (at + 4 > text_.size()) return false;
    unsigned value = 0;
    for (size_t i = 0; i < 4; ++i) {
      const char c = text_[at + i];
      unsigned digit = 0;
      if (c >= '0' && c <= '9') {
        digit = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<unsigned>(c - 'A' + 10);
      } else {
        return false;
      }
      value = value * 16 + digit;
    }
    *out = value;
    return true;
  }

  bool ParseString() {
    const size_t start = at_;
    ++at_;
    while (true) {
      if (at_ >= text_.size()) return Fail(start);
      const auto c = static_cast<unsigned char>(text_[at_]);
      if (c == '"') {
        ++at_;
        return true;
      }
      if (c < 0x20) return Fail(at_);
      if (c >= 0x80) {
        const size_t length = Utf8MultiByteLength(text_, at_);
        if (length == 0) return Fail(at_);
        at_ += length;
        continue;
      }
      if (c != '\\') {
        ++at_;
        continue;
      }
      const size_t escape = at_;
      if (at_ + 1 >= text_.size()) return Fail(escape);
      const char kind = text_[at_ + 1];
      if (std::string_view("\"\\/bfnrt").find(kind) != std::string_view::npos) {
        at_ += 2;
        continue;
      }
      unsigned unit = 0;
      if (kind != 'u' || !Hex4(at_ + 2, &unit)) return Fail(escape);
      at_ += 6;
      if (unit >= 0xDC00 && unit <= 0xDFFF) return Fail(escape);
      if (unit >= 0xD800 && unit <= 0xDBFF) {
        unsigned low = 0;
        if (!At('\\') || at_ + 1 >= text_.size() || text_[at_ + 1] != 'u' || !Hex4(at_ + 2, &low) ||
            low < 0xDC00 || low > 0xDFFF) {
          return Fail(escape);
        }
        at_ += 6;
      }
    }
  }

  bool ParseNumber() {
    const size_t start = at_;
    const bool negative = At('-');
    if (negative) ++at_;
    if (!AtDigit()) return Fail(start);
    const size_t integer_start = at_;
    if (At('0')) {
      ++at_;
    } else {
      SkipDigits();
    }
    const std::string_view integer_digits = text_.substr(integer_start, at_ - integer_start);
    std::string_view fraction_digits;
    bool integer = true;
    int64_t exponent = 0;
    if (At('.')) {
      const size_t fraction_start = ++at_;
      if (!AtDigit()) return Fail(start);
      SkipDigits();
      fraction_digits = text_.substr(fraction_start, at_ - fraction_start);
      integer = false;
    }
    if (At('e') || At('E')) {
      ++at_;
      const bool negative_exponent = At('-');
      if (At('+') || At('-')) ++at_;
      if (!AtDigit()) return Fail(start);
      for (; AtDigit(); ++at_) {
        exponent = std::min<int64_t>(exponent * 10 + (text_[at_] - '0'), int64_t{1} << 40);
      }
      if (negative_exponent) exponent = -exponent;
      integer = false;
    }
    if (!AtDelimiter()) return Fail(start);
    JsonNumber number;
    number.path = path_;
    number.offset = start;
    number.text = text_.substr(start, at_ - start);
    if (integer) {
      // simdjson keeps integers in [-2^63, 2^64 - 1].
      uint64_t magnitude = 0;
      for (const char c : integer_digits) {
        const auto digit = static_cast<uint64_t>(c - '0');
        if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
          number.held = false;
          break;
        }
        magnitude = magnitude * 10 + digit;
      }
      if (negative && magnitude > (uint64_t{1} << 63)) number.held = false;
    } else {
      number.held = HeldAsDouble(number.text, integer_digits, fraction_digits, exponent);
    }
    on_number_(number);
    return true;
  }

  std::string_view text_;
  absl::FunctionRef<void(const JsonNumber&)> on_number_;
  std::vector<uint32_t> path_;
  size_t at_ = 0;
  size_t error_ = 0;
};

}  // namespace

std::optional<size_t> ScanJson(std::string_view text,
                               absl::FunctionRef<void(const JsonNumber&)> on_number) {
  return Scanner(text, on_number).Scan();
}

std::optional<size_t> LocateJsonError(std::string_view text, bool utf8_error) {
  if (utf8_error) return FindInvalidUtf8(text);
  return ScanJson(text, [](const JsonNumber&) {});
}

size_t MaskUnheldNumbers(char* text, size_t size) {
  std::vector<JsonNumber> unheld;
  const std::string_view view(text, size);
  ScanJson(view, [&](const JsonNumber& number) {
    if (!number.held) unheld.push_back({{}, number.offset, number.text, false});
  });
  // An unheld number has at least 5 bytes ("1e309"; an integer past 64 bits 20).
  static constexpr std::string_view kMask = "0.0";
  for (const JsonNumber& number : unheld) {
    std::fill_n(text + number.offset, number.text.size(), ' ');
    std::copy_n(kMask.data(), std::min(kMask.size(), number.text.size()), text + number.offset);
  }
  return unheld.size();
}

std::optional<std::string_view> NumberAt(std::string_view text, std::span<const uint32_t> path) {
  std::optional<std::string_view> found;
  ScanJson(text, [&](const JsonNumber& number) {
    if (!found && std::ranges::equal(number.path, path)) found = number.text;
  });
  return found;
}

}  // namespace tally::derived
