// How the derived layer's messages show what a client sent (change_json.h, key_part.h):
// never more than kShownBytes bytes of it, cut at a UTF-8 boundary with "...", so that a
// megabyte of garbage does not come back in an error.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tally::derived {

// How many bytes of received text a message shows.
inline constexpr size_t kShownBytes = 40;

// `text` as a JSON string: quoted, with '"', '\' and control bytes escaped, cut after
// kShownBytes bytes. Other bytes are kept as they are.
std::string Quoted(std::string_view text);

// `text` as it is (a number as the body wrote it), cut after kShownBytes bytes.
std::string Shown(std::string_view text);

}  // namespace tally::derived
