#include "programs/verify/verify.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "engine/definitions/time_util.h"
#include "programs/verify/compare.h"
#include "programs/verify/progress.h"
#include "programs/verify/repair.h"
#include "programs/verify/resp_client.h"
#include "programs/verify/source_side.h"
#include "programs/verify/tally_side.h"

namespace tally::verify {
namespace {

using Clock = std::chrono::steady_clock;

// How many snapshots verify takes before it gives up on one that tallyd has not run past.
constexpr int kMostAttempts = 5;

// The source at one position: a transaction that sees the rows exactly as of the
// consistent point `at` of a temporary slot, and tallyd held there with everything up to
// `at` applied.
struct Snapshot {
  std::unique_ptr<Source> source;
  Lsn at = 0;
};

// What the counters' comparisons added up to.
struct Outcome {
  uint64_t differing_counters = 0;
  uint64_t differences = 0;
  uint64_t repaired = 0;
  uint64_t still_different = 0;
  uint64_t not_compared = 0;
};

Error Failed(std::string message) { return Error{ErrorCode::kUnavailable, std::move(message)}; }

// The counters named in `options` (all when none), in that order, each once.
Result<std::vector<Counter>> ChooseCounters(RespClient& tally, const VerifyOptions& options) {
  auto all = ListCounters(tally);
  if (!all) return tl::unexpected(all.error());
  if (options.counters.empty()) {
    if (all->empty()) {
      return InvalidArgument("tallyd at " + options.server + " has no counters to verify");
    }
    return all;
  }
  std::vector<Counter> chosen;
  for (const std::string& name : options.counters) {
    auto it = std::ranges::find(*all, name, &Counter::name);
    if (it == all->end()) {
      std::string names;
      for (const Counter& c : *all) names += (names.empty() ? "" : ", ") + c.name;
      return InvalidArgument(fmt::format("unknown counter '{}' (tallyd has: {})", name,
                                         names.empty() ? "none" : names));
    }
    if (std::ranges::find(chosen, name, &Counter::name) == chosen.end()) chosen.push_back(*it);
  }
  return chosen;
}

// Creates the slot, holds tallyd at its consistent point and waits until the hold is
// reached. nullopt (the hold released) when tallyd turns out to have applied something past
// the consistent point before the hold landed: try again.
Result<std::optional<Snapshot>> HoldAtSnapshot(RespClient& tally, Hold& hold,
                                               const VerifyOptions& options,
                                               std::chrono::milliseconds timeout) {
  Snapshot snap;
  auto source = Source::Connect(options.source, timeout);
  if (!source) return tl::unexpected(source.error());
  snap.source = std::move(*source);
  auto before = snap.source->CurrentWalPosition();
  if (!before) return tl::unexpected(before.error());

  // A first hold at the WAL position now: tallyd cannot run far past the consistent point
  // while the slot is being created.
  if (auto s = hold.Set(tally, *before); !s) return tl::unexpected(s.error());
  auto created = snap.source->CreateSlot();
  if (!created) return tl::unexpected(created.error());
  const Lsn at = snap.at = created->consistent_point;
  if (at != *before) {
    if (auto s = hold.Move(tally, at); !s) return tl::unexpected(s.error());
  }
  if (auto s = snap.source->ImportSnapshot(created->snapshot); !s) {
    return tl::unexpected(s.error());
  }

  // Wait until tallyd has applied everything up to the consistent point.
  const auto hold_deadline = Clock::now() + timeout;
  for (;;) {
    auto report = ReadHold(tally);
    if (!report) return tl::unexpected(report.error());
    if (!report->HeldAt(at)) {
      return tl::unexpected(Failed(fmt::format(
          "the hold at {} was lifted by someone else (COUNTER.HOLD shows held {} at {})",
          FormatLsn(at), report->held ? 1 : 0, report->position)));
    }
    if (report->reached) {
      // The highest position a source applied says which transactions tallyd has applied.
      // Above `at`, a transaction after the snapshot slipped in before the hold landed.
      if (!report->AppliedPast(at)) break;
      fmt::print(stderr,
                 "tally verify: tallyd had applied source position {} past the snapshot's {}; "
                 "again with a new snapshot\n",
                 report->applied, FormatLsn(at));
      if (auto s = hold.Release(&tally); !s) return tl::unexpected(s.error());
      return std::optional<Snapshot>();
    }
    if (Clock::now() >= hold_deadline) {
      if (auto s = hold.Release(&tally); !s) return tl::unexpected(s.error());
      return tl::unexpected(Failed(
          fmt::format("tallyd did not reach source position {} within {} s: is its PostgreSQL "
                      "source streaming? (see INFO; --timeout)",
                      FormatLsn(at), options.timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::optional<Snapshot>(std::move(snap));
}

// Drops from both sides the groups past the counter's retention by tallyd's clock now (read
// after both sides were). Returns how many source groups went.
Result<size_t> DropExpiredGroups(RespClient& tally, const Counter& counter, Groups& source,
                                 Groups& mine) {
  if (!counter.compiled->retention()) return 0;
  auto now = ServerMicros(tally);
  if (!now) return tl::unexpected(now.error());
  const size_t expired = DropExpired(*counter.compiled, *now, source);
  DropExpired(*counter.compiled, *now, mine);
  return expired;
}

void PrintDifferences(const Counter& counter, const std::vector<Difference>& differences) {
  for (const Difference& d : differences) {
    fmt::print("{}: tally {}, source {}\n", d.key, ShownText(*counter.compiled, d.tally),
               ShownText(*counter.compiled, d.source));
  }
}

// Compares one whole counter at the snapshot, repairs it with --repair, and prints its
// lines; adds up in `outcome`.
Status VerifyCounter(const Counter& counter, RespClient& tally, Source& source,
                     const VerifyOptions& options, Outcome& outcome) {
  // A terminal gets a progress bar for large families only; --progress always.
  const bool show = options.progress || (isatty(STDERR_FILENO) != 0 && counter.groups >= 10'000);
  Progress progress(show, counter.name, counter.groups);
  auto theirs = source.CounterGroups(counter, progress);
  if (!theirs) return tl::unexpected(theirs.error());
  auto mine = TallyGroups(tally, counter, progress);
  if (!mine) return tl::unexpected(mine.error());
  progress.Finish();
  auto expired = DropExpiredGroups(tally, counter, *theirs, *mine);
  if (!expired) return tl::unexpected(expired.error());
  if (*expired > 0) {
    fmt::print("{}: {} past its retention of {}, not compared\n", counter.name,
               Plural(*expired, "source group", "source groups"),
               definitions::RetentionText(*counter.compiled->retention()));
  }
  const std::vector<Difference> diffs = Compare(*counter.compiled, *mine, *theirs);
  PrintDifferences(counter, diffs);
  if (diffs.empty()) {
    fmt::print("{}: equal ({})\n", counter.name, Plural(theirs->size(), "group", "groups"));
    std::fflush(stdout);
    return OkStatus();
  }
  ++outcome.differing_counters;
  outcome.differences += diffs.size();
  fmt::print("{}: {} ({} at the source, {} in tally)\n", counter.name,
             Plural(diffs.size(), "difference", "differences"), Thousands(theirs->size()),
             Thousands(mine->size()));
  std::fflush(stdout);
  if (!options.repair) return OkStatus();
  if (auto s = RepairCounter(counter, tally, source, diffs); !s) return s;
  Progress again(show, counter.name, static_cast<int64_t>(theirs->size()));
  mine = TallyGroups(tally, counter, again);
  if (!mine) return tl::unexpected(mine.error());
  again.Finish();
  if (auto dropped = DropExpiredGroups(tally, counter, *theirs, *mine); !dropped) {
    return tl::unexpected(dropped.error());
  }
  const std::vector<Difference> left = Compare(*counter.compiled, *mine, *theirs);
  if (left.empty()) {
    outcome.repaired += diffs.size();
    fmt::print("{}: repaired {}, now equal\n", counter.name,
               Plural(diffs.size(), "group", "groups"));
  } else {
    outcome.still_different += left.size();
    PrintDifferences(counter, left);
    fmt::print("{}: still {} after the repair\n", counter.name,
               Plural(left.size(), "difference", "differences"));
  }
  std::fflush(stdout);
  return OkStatus();
}

// What the last line says of repairs after its differences.
std::string_view RepairHint(const VerifyOptions& options) {
  return options.repair ? " after the repair" : " (--repair fixes them)";
}

// Prints the last line and returns the exit status.
int Summarize(const Outcome& outcome, size_t chosen, const VerifyOptions& options, Lsn at) {
  const std::string skipped =
      outcome.not_compared == 0
          ? std::string()
          : fmt::format("; {} not compared (pending or being backfilled: verify again later)",
                        Plural(outcome.not_compared, "counter", "counters"));
  const int equal = outcome.not_compared == 0 ? kExitEqual : kExitNotCompared;
  const uint64_t compared = chosen - outcome.not_compared;
  if (compared == 0) {
    fmt::print("tally verify: nothing compared at source position {}{}\n", FormatLsn(at), skipped);
    return kExitNotCompared;
  }
  if (outcome.differences == 0) {
    fmt::print("tally verify: equal: {} at source position {}{}\n",
               Plural(compared, "counter", "counters"), FormatLsn(at), skipped);
    return equal;
  }
  if (options.repair && outcome.still_different == 0) {
    fmt::print("tally verify: repaired {} in {}; now equal at source position {}{}\n",
               Plural(outcome.repaired, "group", "groups"),
               Plural(outcome.differing_counters, "counter", "counters"), FormatLsn(at), skipped);
    return equal;
  }
  fmt::print("tally verify: {} in {} of {} at source position {}{}{}\n",
             Plural(options.repair ? outcome.still_different : outcome.differences, "difference",
                    "differences"),
             Thousands(outcome.differing_counters), Plural(compared, "counter", "counters"),
             FormatLsn(at), RepairHint(options), skipped);
  return kExitDifferent;
}

// Everything from the first hold on: the snapshot, the comparisons, the last line.
Result<int> VerifyHeld(RespClient& tally, Hold& hold, const VerifyOptions& options,
                       const std::vector<Counter>& chosen, std::chrono::milliseconds timeout) {
  std::optional<Snapshot> held;
  for (int attempt = 1; !held; ++attempt) {
    auto taken = HoldAtSnapshot(tally, hold, options, timeout);
    if (!taken) return tl::unexpected(taken.error());
    held = std::move(*taken);
    if (!held && attempt == kMostAttempts) {
      return tl::unexpected(
          Failed(fmt::format("tallyd ran past the snapshot's position before the hold landed, {} "
                             "times in a row",
                             kMostAttempts)));
    }
  }
  const Lsn at = held->at;
  fmt::print("tally verify: {} at source position {}\n",
             Plural(chosen.size(), "counter", "counters"), FormatLsn(at));
  std::fflush(stdout);

  // Which counters are whole, read once the hold stands: a pending counter has no groups
  // and a backfilling one gets its snapshot's rows even under the hold, so comparing them
  // would report differences that are not drift. They are left out, and the exit status
  // says that verify could not vouch for them.
  auto listed = ListCounters(tally);
  if (!listed) return tl::unexpected(listed.error());
  Outcome outcome;
  for (const Counter& counter : chosen) {
    const auto it = std::ranges::find(*listed, counter.name, &Counter::name);
    const std::string state = it == listed->end() ? "dropped" : it->state;
    if (state != "counting") {
      ++outcome.not_compared;
      fmt::print("{}: {}, not compared\n", counter.name,
                 state == "pending"       ? "waiting for its backfill"
                 : state == "backfilling" ? "being backfilled"
                 : state == "dropped"     ? "dropped meanwhile"
                                          : "in state " + state);
      std::fflush(stdout);
      continue;
    }
    if (auto s = VerifyCounter(counter, tally, *held->source, options, outcome); !s) {
      return tl::unexpected(s.error());
    }
  }

  // The comparison holds only if the hold stood throughout, and nothing past it came in (a
  // cluster's source consumer replaced meanwhile).
  auto report = ReadHold(tally);
  if (!report) return tl::unexpected(report.error());
  if (!report->HeldAt(at)) {
    return tl::unexpected(Failed(
        fmt::format("the hold at {} was lifted during the comparison (COUNTER.HOLD shows held {} "
                    "at {}): the result above is not reliable",
                    FormatLsn(at), report->held ? 1 : 0, report->position)));
  }
  if (report->AppliedPast(at)) {
    return tl::unexpected(Failed(
        fmt::format("source position {} was applied during the comparison, past the hold at {}: "
                    "the result above is not reliable",
                    report->applied, FormatLsn(at))));
  }
  if (auto s = hold.Release(&tally); !s) return tl::unexpected(s.error());
  if (auto s = held->source->Commit(); !s) return tl::unexpected(s.error());
  return Summarize(outcome, chosen.size(), options, at);
}

}  // namespace

Result<int> Verify(const VerifyOptions& options, Hold& hold) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout * 1000));
  const auto io_timeout = std::max(timeout, std::chrono::milliseconds(30'000));
  RespClient tally;
  if (auto s = tally.Connect(options.server, options.tallyd, std::chrono::milliseconds(5000),
                             io_timeout);
      !s) {
    return tl::unexpected(s.error());
  }
  auto chosen = ChooseCounters(tally, options);
  if (!chosen) return tl::unexpected(chosen.error());
  Result<int> result = VerifyHeld(tally, hold, options, *chosen, timeout);
  // However it went, the hold goes.
  if (auto released = hold.Release(&tally); !released) {
    std::fflush(stdout);
    fmt::print(stderr, "tally verify: releasing the hold failed: {} (send COUNTER.RELEASE)\n",
               released.error().message);
  }
  return result;
}

}  // namespace tally::verify
