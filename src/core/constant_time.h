// Comparing secrets (passwords, tokens) in time that does not depend on where a guess
// first differs, so that response times do not reveal a secret byte by byte.
#pragma once

#include <cstddef>
#include <string_view>

namespace tally {

// Whether `given` equals `secret`. Reads every byte of `secret` whatever `given` is: the
// time depends on secret.size() only (a secret's length is not hidden).
inline bool ConstantTimeEquals(std::string_view given, std::string_view secret) {
  // volatile: the compiler may not turn the loop into an early-exit comparison.
  volatile unsigned char difference = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    const auto g = static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    difference = difference | static_cast<unsigned char>(g ^ static_cast<unsigned char>(secret[i]));
  }
  return difference == 0;
}

}  // namespace tally
