// Absl: a std::string_view as abseil's string_view. Debian's abseil has its own string_view
// type, so heterogeneous lookups in absl containers keyed by std::string take that one.
#pragma once

#include <absl/strings/string_view.h>

#include <string_view>

namespace tally {

inline absl::string_view Absl(std::string_view text) { return {text.data(), text.size()}; }

}  // namespace tally
