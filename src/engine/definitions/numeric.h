// Exact decimals for numeric(p,s) columns, sums and averages, with no floating point.
//
// A numeric value of scale s is kept as the integer count of its units of 10^-s, an int64:
// 1234.50 in a numeric(12,2) column is 123450 at scale 2. Scales run from 0 to kMaxScale
// (18), so a unit count always fits and every value of 18 significant digits or fewer is
// exact; a value or a sum past the int64 range of units is refused as an overflow, as the
// int64 sums are. Two values of different scales compare and add exactly (the one of lower
// scale is multiplied up).
//
// The one place a quotient appears is avg(): AvgText spells sum / count with exactly the
// digits PostgreSQL's avg() gives, by PostgreSQL's own rule for the scale of a numeric
// division (select_div_scale in numeric.c: at least 16 significant digits, and never fewer
// digits after the point than the sum has) and its rounding (half away from zero).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tally::definitions {

// The largest scale a numeric column, literal or expression may have.
inline constexpr int kMaxScale = 18;

// 10^n. REQUIRES: 0 <= n <= 18.
int64_t Pow10(int n);

// `units` at scale `from` as units at scale `to`; nullopt when the result leaves int64.
// REQUIRES: 0 <= from <= to <= kMaxScale.
std::optional<int64_t> Rescale(int64_t units, int from, int to);

// -1, 0 or 1 as a < b, a = b, a > b for `a` units at scale `sa` and `b` at `sb`, exactly.
int CompareUnits(int64_t a, int sa, int64_t b, int sb);

// Reads a decimal as units of scale `scale`: an optional sign, digits with an optional
// '.' and fraction ("1234.5", "-0.05", "12", ".5", "12."). Digits past the scale must be
// zeros ("12.500" at scale 2 is 1250): a value the column cannot hold exactly is refused.
// kInvalidArgument with a phrase to follow the quoted text: "is not a decimal number",
// "has more than 2 digits after the point", "is out of the range of numeric(…, 2) (at most
// 18 digits)".
Result<int64_t> ParseDecimal(std::string_view text, int scale);

// As ParseDecimal, with the phrase alone as the error ("has more than 2 digits after the
// point"), for callers that show the text their own way.
Result<int64_t> ReadDecimal(std::string_view text, int scale);

// Reads a JSON number that a parser gave as a double, as units of scale `scale`: exact when
// the number was written with at most 15 significant digits (every such decimal survives a
// double, and its shortest spelling gives it back); else kInvalidArgument "has more
// significant digits than a JSON number keeps exactly", and for exponents past the plain
// spelling "is too large or too small"; then as ParseDecimal. Clients send a decimal as a
// string ("1234.50") to avoid the question.
Result<int64_t> DecimalOfDouble(double value, int scale);

// The decimal spelling of `units` at `scale`: "1234.50", "-0.05", "12" (scale 0).
std::string FormatDecimal(int64_t units, int scale);
void AppendDecimal(int64_t units, int scale, std::string* out);

// PostgreSQL's avg() of values whose sum is `sum_units` at `scale` over `count` values,
// spelled as PostgreSQL spells it: "1.5000000000000000" for avg(1, 2), "15.0000000000000000"
// for avg(10, 20). REQUIRES: count > 0.
std::string AvgText(int64_t sum_units, int scale, int64_t count);

}  // namespace tally::definitions
