// Argument parsing shared by command handlers, with Redis's error texts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "servers/redis/command_table.h"

namespace tally::redis {

inline constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";
inline constexpr std::string_view kSyntaxError = "ERR syntax error";

// ASCII case-insensitive equality (command names, keywords). Inline: every request's command
// name is compared with the session's last one.
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

// Redis's answer to an unknown subcommand of `command` (CLIENT, COMMAND, CONFIG).
void ReplyUnknownSubcommand(CommandContext& ctx, std::string_view command);

// The argument as int64, or nullopt after replying "value is not an integer".
std::optional<int64_t> IntegerArgument(CommandContext& ctx, std::string_view text);

// The signed amount of INCR/INCRBY (`negate` false) or DECR/DECRBY (true): 1 without an
// amount argument. Nullopt after writing Redis's error for a bad amount to `reply`.
std::optional<int64_t> IncrementAmount(std::span<const std::string_view> args, bool negate,
                                       ReplyWriter& reply);

// An absolute deadline in Unix ms for an expiry given as seconds/milliseconds, relative or
// absolute; nullopt after replying "invalid expire time in '<command>' command" when it
// leaves the representable range (or is not positive and `require_positive`).
enum class ExpiryUnit { kSeconds, kMilliseconds };
std::optional<int64_t> Deadline(CommandContext& ctx, int64_t amount, ExpiryUnit unit, bool absolute,
                                bool require_positive);

}  // namespace tally::redis
