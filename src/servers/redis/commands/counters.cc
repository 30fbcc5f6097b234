// Counter commands: increments, reads and writes of values.
#include <fmt/format.h>

#include "core/integer.h"
#include "servers/redis/command_args.h"
#include "servers/redis/session.h"

namespace tally::redis::commands {
namespace {

constexpr std::string_view kNotCounter =
    "ERR value is not an integer or out of range: tally stores counters, and a SET value must "
    "be a signed 64-bit integer";

void ReplyValue(CommandContext& ctx, const std::optional<int64_t>& value) {
  if (value) {
    ctx.reply.BulkInteger(*value);
  } else {
    ctx.reply.Null();
  }
}

void ReplyIncrement(CommandContext& ctx, const Result<int64_t>& result) {
  if (result) {
    ctx.reply.Integer(*result);
  } else {
    ctx.reply.Error("ERR " + result.error().message);
  }
}

// The value argument of a SET-like command, or nullopt after replying why not.
std::optional<int64_t> CounterValue(CommandContext& ctx, std::string_view text) {
  const std::optional<int64_t> value = ParseInt64(text);
  if (!value) ctx.reply.Error(kNotCounter);
  return value;
}

// The options of SET (NX XX GET EX PX EXAT PXAT KEEPTTL) and GETEX (EX PX EXAT PXAT
// PERSIST), read the way Redis reads them: a repeated option is allowed (the last amount
// wins), a conflicting one is a syntax error, and the amount is checked only afterwards.
struct SetArguments {
  engine::SetOptions options;
  bool get = false;
  bool persist = false;
  std::string_view expiry_option;  // EX, PX, EXAT or PXAT as given; empty when none
  std::string_view expiry_amount;
};

bool ParseSetArguments(CommandContext& ctx, size_t first, bool is_getex, SetArguments* parsed) {
  bool keep_ttl = false;
  for (size_t i = first; i < ctx.args.size(); ++i) {
    const std::string_view option = ctx.args[i];
    const bool has_next = i + 1 < ctx.args.size();
    const bool other_expiry = [&](std::string_view self) {
      return !parsed->expiry_option.empty() && !EqualsIgnoreCase(parsed->expiry_option, self);
    }(option);
    if (!is_getex && EqualsIgnoreCase(option, "NX") &&
        parsed->options.condition != engine::SetCondition::kIfExists) {
      parsed->options.condition = engine::SetCondition::kIfMissing;
    } else if (!is_getex && EqualsIgnoreCase(option, "XX") &&
               parsed->options.condition != engine::SetCondition::kIfMissing) {
      parsed->options.condition = engine::SetCondition::kIfExists;
    } else if (!is_getex && EqualsIgnoreCase(option, "GET")) {
      parsed->get = true;
    } else if (!is_getex && EqualsIgnoreCase(option, "KEEPTTL") && parsed->expiry_option.empty()) {
      keep_ttl = true;
    } else if (is_getex && EqualsIgnoreCase(option, "PERSIST") && parsed->expiry_option.empty()) {
      parsed->persist = true;
    } else if ((EqualsIgnoreCase(option, "EX") || EqualsIgnoreCase(option, "PX") ||
                EqualsIgnoreCase(option, "EXAT") || EqualsIgnoreCase(option, "PXAT")) &&
               !keep_ttl && !parsed->persist && !other_expiry && has_next) {
      parsed->expiry_option = option;
      parsed->expiry_amount = ctx.args[++i];
    } else {
      ctx.reply.Error(kSyntaxError);
      return false;
    }
  }
  parsed->options.expiry =
      keep_ttl || is_getex ? engine::ExpiryAction::kKeep : engine::ExpiryAction::kClear;
  return true;
}

// Turns a parsed EX/PX/EXAT/PXAT into a deadline in the options; false after replying.
bool ResolveExpiry(CommandContext& ctx, SetArguments* parsed) {
  if (parsed->expiry_option.empty()) return true;
  const auto amount = IntegerArgument(ctx, parsed->expiry_amount);
  if (!amount) return false;
  const std::string_view option = parsed->expiry_option;
  const bool seconds = EqualsIgnoreCase(option, "EX") || EqualsIgnoreCase(option, "EXAT");
  const bool absolute = EqualsIgnoreCase(option, "EXAT") || EqualsIgnoreCase(option, "PXAT");
  const auto deadline =
      Deadline(ctx, *amount, seconds ? ExpiryUnit::kSeconds : ExpiryUnit::kMilliseconds, absolute,
               /*require_positive=*/true);
  if (!deadline) return false;
  parsed->options.expiry = engine::ExpiryAction::kSetDeadline;
  parsed->options.deadline_ms = *deadline;
  return true;
}

void IncrementBy(CommandContext& ctx, int64_t delta) {
  ReplyIncrement(ctx, ctx.view->IncrBy(ctx.keys[0], delta));
}

}  // namespace

// Outside MULTI the dispatcher coalesces these in the worker's IncrementBuffer; the
// handlers below run inside EXEC, where every stripe is already held.
void Incr(CommandContext& ctx) { IncrementBy(ctx, 1); }
void Decr(CommandContext& ctx) { IncrementBy(ctx, -1); }

void IncrBy(CommandContext& ctx) {
  if (const auto delta = IncrementAmount(ctx.args, /*negate=*/false, ctx.reply)) {
    IncrementBy(ctx, *delta);
  }
}

void DecrBy(CommandContext& ctx) {
  if (const auto delta = IncrementAmount(ctx.args, /*negate=*/true, ctx.reply)) {
    IncrementBy(ctx, *delta);
  }
}

// INCRBYEX key increment (EX seconds | PX milliseconds) [NX]
// Adds `increment` and sets the expiry in one step. With NX the expiry is set only when
// the counter has none yet: the fixed-window rate limit ("at most N per minute").
void IncrByEx(CommandContext& ctx) {
  const auto delta = IntegerArgument(ctx, ctx.args[2]);
  if (!delta) return;
  const std::string_view unit = ctx.args[3];
  const bool seconds = EqualsIgnoreCase(unit, "EX");
  if (!seconds && !EqualsIgnoreCase(unit, "PX")) {
    ctx.reply.Error(kSyntaxError);
    return;
  }
  bool only_if_no_expiry = false;
  if (ctx.args.size() == 6 && EqualsIgnoreCase(ctx.args[5], "NX")) {
    only_if_no_expiry = true;
  } else if (ctx.args.size() != 5) {
    ctx.reply.Error(kSyntaxError);
    return;
  }
  const auto amount = IntegerArgument(ctx, ctx.args[4]);
  if (!amount) return;
  const auto deadline =
      Deadline(ctx, *amount, seconds ? ExpiryUnit::kSeconds : ExpiryUnit::kMilliseconds,
               /*absolute=*/false, /*require_positive=*/true);
  if (!deadline) return;
  ReplyIncrement(ctx,
                 ctx.view->IncrByWithExpiry(ctx.keys[0], *delta, *deadline, only_if_no_expiry));
}

void Get(CommandContext& ctx) { ReplyValue(ctx, ctx.view->Get(ctx.keys[0])); }

void MGet(CommandContext& ctx) {
  ctx.reply.ArrayHeader(ctx.keys.size());
  for (const engine::HashedKey& key : ctx.keys) ReplyValue(ctx, ctx.view->Get(key));
}

void Set(CommandContext& ctx) {
  SetArguments parsed;
  if (!ParseSetArguments(ctx, 3, /*is_getex=*/false, &parsed)) return;
  if (!ResolveExpiry(ctx, &parsed)) return;
  const auto value = CounterValue(ctx, ctx.args[2]);
  if (!value) return;
  const engine::SetOutcome outcome = ctx.view->Set(ctx.keys[0], *value, parsed.options);
  if (parsed.get) {
    ReplyValue(ctx, outcome.previous);
  } else if (outcome.applied) {
    ctx.reply.SimpleString("OK");
  } else {
    ctx.reply.Null();
  }
}

void SetNx(CommandContext& ctx) {
  const auto value = CounterValue(ctx, ctx.args[2]);
  if (!value) return;
  engine::SetOptions options;
  options.condition = engine::SetCondition::kIfMissing;
  ctx.reply.Integer(ctx.view->Set(ctx.keys[0], *value, options).applied ? 1 : 0);
}

namespace {
void SetWithExpiry(CommandContext& ctx, ExpiryUnit unit) {
  const auto amount = IntegerArgument(ctx, ctx.args[2]);
  if (!amount) return;
  const auto deadline = Deadline(ctx, *amount, unit, false, true);
  if (!deadline) return;
  const auto value = CounterValue(ctx, ctx.args[3]);
  if (!value) return;
  engine::SetOptions options;
  options.expiry = engine::ExpiryAction::kSetDeadline;
  options.deadline_ms = *deadline;
  ctx.view->Set(ctx.keys[0], *value, options);
  ctx.reply.SimpleString("OK");
}

// The values of MSET/MSETNX (every other argument from args[2] on); false after replying.
bool PairValues(CommandContext& ctx, std::vector<int64_t>* values) {
  if (ctx.args.size() % 2 == 0) {
    ctx.reply.Error(fmt::format("ERR wrong number of arguments for '{}' command",
                                EqualsIgnoreCase(ctx.args[0], "mset") ? "mset" : "msetnx"));
    return false;
  }
  for (size_t i = 2; i < ctx.args.size(); i += 2) {
    const auto value = CounterValue(ctx, ctx.args[i]);
    if (!value) return false;
    values->push_back(*value);
  }
  return true;
}
}  // namespace

void SetEx(CommandContext& ctx) { SetWithExpiry(ctx, ExpiryUnit::kSeconds); }
void PSetEx(CommandContext& ctx) { SetWithExpiry(ctx, ExpiryUnit::kMilliseconds); }

void MSet(CommandContext& ctx) {
  std::vector<int64_t> values;
  if (!PairValues(ctx, &values)) return;
  for (size_t i = 0; i < values.size(); ++i) ctx.view->Set(ctx.keys[i], values[i], {});
  ctx.reply.SimpleString("OK");
}

void MSetNx(CommandContext& ctx) {
  std::vector<int64_t> values;
  if (!PairValues(ctx, &values)) return;
  for (const engine::HashedKey& key : ctx.keys) {
    if (ctx.view->Exists(key)) {
      ctx.reply.Integer(0);
      return;
    }
  }
  for (size_t i = 0; i < values.size(); ++i) ctx.view->Set(ctx.keys[i], values[i], {});
  ctx.reply.Integer(1);
}

void GetSet(CommandContext& ctx) {
  const auto value = CounterValue(ctx, ctx.args[2]);
  if (!value) return;
  ReplyValue(ctx, ctx.view->Set(ctx.keys[0], *value, {}).previous);
}

void GetDel(CommandContext& ctx) {
  const auto value = ctx.view->Get(ctx.keys[0]);
  if (value) ctx.view->Delete(ctx.keys[0]);
  ReplyValue(ctx, value);
}

void GetEx(CommandContext& ctx) {
  SetArguments parsed;
  if (!ParseSetArguments(ctx, 2, /*is_getex=*/true, &parsed)) return;
  const auto value = ctx.view->Get(ctx.keys[0]);
  // As Redis: a missing key answers nil before the expiry amount is looked at.
  if (value && !ResolveExpiry(ctx, &parsed)) return;
  if (value) {
    if (parsed.persist) {
      ctx.view->Persist(ctx.keys[0]);
    } else if (parsed.options.expiry == engine::ExpiryAction::kSetDeadline) {
      ctx.view->Expire(ctx.keys[0], parsed.options.deadline_ms, engine::ExpireCondition::kAlways);
    }
  }
  ReplyValue(ctx, value);
}

}  // namespace tally::redis::commands
