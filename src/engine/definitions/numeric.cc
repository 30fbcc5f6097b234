#include "engine/definitions/numeric.h"

#include <fmt/format.h>

#include <algorithm>

namespace tally::definitions {

namespace {

using Int128 = __int128;

constexpr int64_t kPowers[] = {1,
                               10,
                               100,
                               1000,
                               10000,
                               100000,
                               1000000,
                               10000000,
                               100000000,
                               1000000000,
                               10000000000,
                               100000000000,
                               1000000000000,
                               10000000000000,
                               100000000000000,
                               1000000000000000,
                               10000000000000000,
                               100000000000000000,
                               1000000000000000000};

Int128 Pow10Wide(int n) {
  Int128 out = 1;
  for (int i = 0; i < n; ++i) out *= 10;
  return out;
}

// The decimal digits of a non-negative value.
std::string Digits(Int128 value) {
  if (value == 0) return "0";
  std::string out;
  for (; value > 0; value /= 10)
    out.push_back(static_cast<char>('0' + static_cast<int>(value % 10)));
  std::reverse(out.begin(), out.end());
  return out;
}

// PostgreSQL's view of a positive numeric: digits in base 10000, `weight` the power of
// 10000 of the first one, `first` its value (1..9999). Zero has weight 0 and first 0.
struct BaseTenThousand {
  int weight = 0;
  int64_t first = 0;
};

// The value magnitude·10^-scale in PostgreSQL's base-10000 terms.
BaseTenThousand LeadingDigit(Int128 magnitude, int scale) {
  if (magnitude == 0) return {};
  const int digits = static_cast<int>(Digits(magnitude).size());
  // The value lies in [10^e, 10^(e+1)); its first base-10000 digit has weight floor(e / 4).
  const int e = digits - 1 - scale;
  const int weight = e >= 0 ? e / 4 : -((-e + 3) / 4);
  // first = floor(magnitude / 10^(scale + 4·weight)), the shift possibly negative.
  const int shift = scale + 4 * weight;
  const Int128 first = shift >= 0 ? magnitude / Pow10Wide(shift) : magnitude * Pow10Wide(-shift);
  return {weight, static_cast<int64_t>(first)};
}

}  // namespace

int64_t Pow10(int n) { return kPowers[n]; }

std::optional<int64_t> Rescale(int64_t units, int from, int to) {
  int64_t out;
  if (__builtin_mul_overflow(units, kPowers[to - from], &out)) return std::nullopt;
  return out;
}

int CompareUnits(int64_t a, int sa, int64_t b, int sb) {
  const int scale = std::max(sa, sb);
  const Int128 x = static_cast<Int128>(a) * kPowers[scale - sa];
  const Int128 y = static_cast<Int128>(b) * kPowers[scale - sb];
  return x < y ? -1 : (x > y ? 1 : 0);
}

Result<int64_t> ReadDecimal(std::string_view text, int scale) {
  const auto refuse = [](std::string_view why) { return InvalidArgument(std::string(why)); };
  size_t at = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) at = 1;
  Int128 units = 0;
  int whole_digits = 0;
  int fraction_digits = 0;
  bool point = false;
  for (; at < text.size(); ++at) {
    const char c = text[at];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (c < '0' || c > '9') return refuse("is not a decimal number");
    if (point) {
      if (++fraction_digits > scale) {
        if (c != '0') {
          return refuse(fmt::format("has more than {} digit{} after the point", scale,
                                    scale == 1 ? "" : "s"));
        }
        continue;
      }
    } else {
      ++whole_digits;
    }
    units = units * 10 + (c - '0');
    if (units > INT64_MAX) {
      return refuse(
          fmt::format("is out of the range of numeric(…, {}) (at most 18 digits)", scale));
    }
  }
  if (whole_digits + fraction_digits == 0) return refuse("is not a decimal number");
  for (int i = std::min(fraction_digits, scale); i < scale; ++i) {
    units *= 10;
    if (units > INT64_MAX) {
      return refuse(
          fmt::format("is out of the range of numeric(…, {}) (at most 18 digits)", scale));
    }
  }
  return static_cast<int64_t>(negative ? -units : units);
}

Result<int64_t> ParseDecimal(std::string_view text, int scale) {
  Result<int64_t> units = ReadDecimal(text, scale);
  if (!units) {
    return InvalidArgument(fmt::format("\"{}\" {}", text.substr(0, 40), units.error().message));
  }
  return units;
}

Result<int64_t> DecimalOfDouble(double value, int scale) {
  const std::string text = fmt::format("{}", value);
  if (text.find_first_of("einaEINA") != std::string::npos) {
    return InvalidArgument(fmt::format("{} is too large or too small for a numeric", text));
  }
  size_t significant = 0;
  bool leading = true;
  for (const char c : text) {
    if (c < '0' || c > '9') continue;
    if (leading && c == '0') continue;
    leading = false;
    ++significant;
  }
  if (significant > 15) {
    return InvalidArgument(fmt::format(
        "{} has more significant digits than a JSON number keeps exactly: send it as a string",
        text));
  }
  return ParseDecimal(text, scale);
}

void AppendDecimal(int64_t units, int scale, std::string* out) {
  const bool negative = units < 0;
  const Int128 magnitude = negative ? -static_cast<Int128>(units) : static_cast<Int128>(units);
  std::string digits = Digits(magnitude);
  if (static_cast<int>(digits.size()) <= scale) {
    digits.insert(0, static_cast<size_t>(scale) + 1 - digits.size(), '0');
  }
  if (negative) out->push_back('-');
  const size_t whole = digits.size() - static_cast<size_t>(scale);
  out->append(digits, 0, whole);
  if (scale > 0) {
    out->push_back('.');
    out->append(digits, whole, std::string::npos);
  }
}

std::string FormatDecimal(int64_t units, int scale) {
  std::string out;
  AppendDecimal(units, scale, &out);
  return out;
}

std::string AvgText(int64_t sum_units, int scale, int64_t count) {
  const bool negative = sum_units < 0;
  const Int128 magnitude =
      negative ? -static_cast<Int128>(sum_units) : static_cast<Int128>(sum_units);
  // PostgreSQL's select_div_scale: the quotient's weight estimated from the first digits in
  // base 10000, then enough digits after the point for 16 significant ones, and at least
  // the sum's own scale.
  const BaseTenThousand sum = LeadingDigit(magnitude, scale);
  const BaseTenThousand n = LeadingDigit(count, 0);
  int qweight = sum.weight - n.weight;
  if (sum.first <= n.first) --qweight;
  const int rscale = std::min(std::max({16 - qweight * 4, scale, 0}), 1000);

  // Long division of magnitude by count·10^scale, one digit past rscale, then rounded half
  // away from zero at rscale (PostgreSQL's div_var with round: exact digits, round_var).
  const Int128 divisor = static_cast<Int128>(count) * Pow10Wide(scale);
  std::string digits = Digits(magnitude / divisor);
  Int128 rest = magnitude % divisor;
  for (int i = 0; i <= rscale; ++i) {
    rest *= 10;
    digits.push_back(static_cast<char>('0' + static_cast<int>(rest / divisor)));
    rest %= divisor;
  }
  const bool round_up = digits.back() >= '5';
  digits.pop_back();
  if (round_up) {
    size_t i = digits.size();
    while (i > 0 && digits[i - 1] == '9') digits[--i] = '0';
    if (i == 0) {
      digits.insert(digits.begin(), '1');
    } else {
      ++digits[i - 1];
    }
  }
  const size_t point = digits.size() - static_cast<size_t>(rscale);
  std::string out;
  const bool zero = digits.find_first_not_of('0') == std::string::npos;
  if (negative && !zero) out.push_back('-');
  out.append(digits, 0, point);
  if (rscale > 0) {
    out.push_back('.');
    out.append(digits, point, std::string::npos);
  }
  return out;
}

}  // namespace tally::definitions
