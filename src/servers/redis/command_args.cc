#include "servers/redis/command_args.h"

#include <fmt/format.h>

#include "core/integer.h"

namespace tally::redis {

void ReplyUnknownSubcommand(CommandContext& ctx, std::string_view command) {
  ctx.reply.Error(
      fmt::format("ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
                  ctx.args[1], command));
}

std::optional<int64_t> IntegerArgument(CommandContext& ctx, std::string_view text) {
  const std::optional<int64_t> value = ParseInt64(text);
  if (!value) ctx.reply.Error(kNotInteger);
  return value;
}

std::optional<int64_t> IncrementAmount(std::span<const std::string_view> args, bool negate,
                                       ReplyWriter& reply) {
  int64_t amount = 1;
  if (args.size() == 3) {
    const std::optional<int64_t> parsed = ParseInt64(args[2]);
    if (!parsed) {
      reply.Error(kNotInteger);
      return std::nullopt;
    }
    amount = *parsed;
  }
  if (!negate) return amount;
  if (amount == INT64_MIN) {
    reply.Error("ERR decrement would overflow");
    return std::nullopt;
  }
  return -amount;
}

std::optional<int64_t> Deadline(CommandContext& ctx, int64_t amount, ExpiryUnit unit, bool absolute,
                                bool require_positive) {
  const auto invalid = [&] {
    std::string command(ctx.args[0]);
    for (char& c : command) c = AsciiLower(c);
    ctx.reply.Error(fmt::format("ERR invalid expire time in '{}' command", command));
    return std::nullopt;
  };
  if (require_positive && amount <= 0) return invalid();
  int64_t millis = amount;
  if (unit == ExpiryUnit::kSeconds && __builtin_mul_overflow(amount, 1000, &millis)) {
    return invalid();
  }
  if (absolute) return millis;
  const std::optional<int64_t> deadline = CheckedAdd(millis, ctx.view->now_ms());
  if (!deadline) return invalid();
  return *deadline;
}

}  // namespace tally::redis
