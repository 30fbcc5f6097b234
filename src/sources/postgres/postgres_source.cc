// PostgresSource's life (see postgres_source.h for the contract, source_session.h for the
// files of the source): Start, what it refuses and what it leaves to the thread to retry;
// the thread's loop of sessions with backoff; one session from the slot's check (and the
// backfill it may need) to the stream; Stop; the figures.
#include "sources/postgres/postgres_source.h"

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/thread_name.h"
#include "sources/postgres/source_session.h"

namespace tally::postgres {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

PostgresSource::PostgresSource(engine::Engine& engine, derived::DerivedCounters& derived,
                               PostgresSourceOptions options, SourceTarget* target)
    : engine_(engine),
      derived_(derived),
      own_target_(target == nullptr ? std::make_unique<LocalSourceTarget>(engine, derived)
                                    : nullptr),
      target_(target == nullptr ? *own_target_ : *target),
      options_(std::move(options)),
      applied_(std::make_shared<AppliedPosition>()) {
  session_conninfo_ = WithSessionSettings(options_.conninfo);
  target_.AddDurableListener([applied = applied_](uint64_t epoch) { applied->Durable(epoch); });
  applied_->Durable(target_.durable_epoch());  // those before the listener
}

PostgresSource::~PostgresSource() { Stop(); }

bool PostgresSource::stopping() const {
  std::lock_guard lock(mutex_);
  return stop_;
}

void PostgresSource::SetState(const std::string& state, bool connected) {
  std::lock_guard lock(mutex_);
  stats_.state = state;
  stats_.connected = connected;
}

void PostgresSource::SetError(const std::string& error) {
  std::lock_guard lock(mutex_);
  stats_.error = error;
}

PostgresSource::Stats PostgresSource::stats() const {
  const Lsn applied = applied_->position();
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.applied_lsn = applied;
  // Caught up, whatever else the server's WAL holds (other tables, other databases).
  const bool caught_up = caught_up_at_ != 0 && applied >= caught_up_at_;
  s.lag_bytes = caught_up || s.server_wal_end <= applied ? 0 : s.server_wal_end - applied;
  if (s.lag_bytes == 0) s.lag_seconds = 0;
  return s;
}

Status PostgresSource::Start() {
  for (const derived::CounterListing& counter : derived_.Counters()) {
    if (std::ranges::find(sources_, counter.source) == sources_.end())
      sources_.push_back(counter.source);
  }
  std::ranges::sort(sources_);
  if (sources_.empty()) {
    return InvalidArgument(
        "--source: no counter is defined, so there is no table to follow (give --definitions "
        "with CREATE SOURCE and CREATE COUNTER statements)");
  }
  // What the store holds is applied and durable: reported before PostgreSQL is reached (it
  // may not be there yet), once every table has a stored position.
  int64_t stored = std::numeric_limits<int64_t>::max();
  for (const std::string& source : sources_)
    stored = std::min(stored, target_.SourcePosition(source));
  if (stored > 0) applied_->Add(0, static_cast<Lsn>(stored));
  // From now on a counter defined on a source — these, or a table not followed yet — is
  // backfilled from a snapshot.
  if (auto status = target_.MarkEverySourceStreamed(); !status) return status;
  SetState("starting", false);
  std::unique_ptr<Session> session;
  if (auto s = Connect(&session); !s) {
    // What trying again cannot fix is refused now. PostgreSQL not there yet (a host's
    // reboot, a deploy) is waited for, as a running source waits for it to come back.
    if (s.error().code != ErrorCode::kUnavailable) return s;
    session.reset();
    SetError(s.error().message);
    SetState("reconnecting", false);
    spdlog::warn("postgres source: {}; retrying in {} ms (until then tallyd serves what it has)",
                 s.error().message, options_.backoff_initial.count());
  }
  thread_ = NamedThread("pg source", [this, s = std::move(session)]() mutable {
    Run(std::move(s));
    std::lock_guard lock(mutex_);
    finished_ = true;
    wake_.notify_all();
  });
  return OkStatus();
}

void PostgresSource::Stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (!thread_.joinable()) return;
  // The thread may wait in ApplyTransaction for a verification hold: let it go (it applies
  // that one transaction, then sees stop_), again if a new hold catches it before it ends.
  std::unique_lock lock(mutex_);
  while (!finished_) {
    lock.unlock();
    target_.Release();
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return finished_; });
  }
  lock.unlock();
  thread_.join();
}

StatusReport PostgresSource::Report() const {
  const Stats s = stats();
  const derived::HoldState hold = target_.hold_state();
  const double percent = s.backfill_total == 0
                             ? 100.0
                             : std::min(100.0, 100.0 * static_cast<double>(s.backfill_rows) /
                                                   static_cast<double>(s.backfill_total));
  StatusReport report;
  report.push_back({"state", s.state});
  report.push_back({"connected", s.connected});
  report.push_back({"received_lsn", FormatLsn(s.received_lsn)});
  report.push_back({"applied_lsn", FormatLsn(s.applied_lsn)});
  report.push_back({"lag_bytes", s.lag_bytes});
  report.push_back({"lag_seconds", s.lag_seconds});
  report.push_back({"transactions", s.transactions});
  report.push_back({"rows", s.rows});
  report.push_back({"reconnects", s.reconnects});
  report.push_back({"backfilling", s.backfilling});
  report.push_back({"backfill_rows", s.backfill_rows});
  report.push_back({"backfill_total", s.backfill_total});
  report.push_back({"backfill_percent", std::floor(percent * 10) / 10});
  report.push_back({"hold", hold.held
                                ? FormatLsn(static_cast<Lsn>(std::max<int64_t>(hold.position, 0)))
                                : std::string("none")});
  report.push_back({"hold_reached", hold.held && hold.reached});
  report.push_back({"error", s.error});
  return report;
}

void PostgresSource::Pause(std::chrono::milliseconds* backoff) {
  std::unique_lock lock(mutex_);
  ++stats_.reconnects;
  wake_.wait_for(lock, *backoff, [this] { return stop_; });
  *backoff = std::min(*backoff * 2, options_.backoff_max);
}

void PostgresSource::Run(std::unique_ptr<Session> session) {
  auto backoff = options_.backoff_initial;
  if (session == nullptr) Pause(&backoff);
  while (!stopping()) {
    if (session == nullptr) {
      SetState("reconnecting", false);
      if (auto s = Connect(&session); !s) {
        session.reset();
        SetError(s.error().message);
        if (s.error().code == ErrorCode::kUnavailable) {
          spdlog::warn("postgres source: {}; retrying in {} ms", s.error().message,
                       backoff.count());
        } else {
          spdlog::error("postgres source: {}; retrying in {} ms, but this needs fixing first",
                        s.error().message, backoff.count());
        }
        Pause(&backoff);
        continue;
      }
    }
    bool fatal = false;
    const uint64_t transactions_before = stats().transactions;
    auto status = RunSession(*session, &fatal);
    const bool progressed = stats().transactions != transactions_before;
    const bool reconnect = status && session->reconnect;
    session.reset();
    if (stopping()) break;
    if (reconnect) continue;
    const std::string message = status ? std::string("the stream ended") : status.error().message;
    SetError(message);
    if (fatal) {
      SetState("failed", false);
      spdlog::error(
          "postgres source stopped: {}. Nothing more is applied; the counters keep "
          "what was counted before. Fix the cause and restart tallyd.",
          message);
      return;
    }
    if (progressed) backoff = options_.backoff_initial;
    spdlog::warn("postgres source: {}; reconnecting in {} ms", message, backoff.count());
    SetState("reconnecting", false);
    Pause(&backoff);
  }
  SetState("stopped", false);
}

Result<derived::PushOutcome> PostgresSource::ApplyTo(
    std::string_view source, std::span<const derived::SourceRowChange> changes, int64_t position) {
  const derived::SourceTransactionPart part{source, changes};
  return target_.ApplyTransaction({&part, 1}, position);
}

Status PostgresSource::RunSession(Session& session, bool* fatal) {
  ReplicationStream& stream = *session.stream;
  if (auto s = target_.BeginSession(session.sql.get()); !s) return s;
  for (Table& table : session.tables) table.position = target_.SourcePosition(table.source);
  bool backfill =
      std::ranges::any_of(session.tables, [](const Table& t) { return t.position == 0; });
  auto slot = stream.FindSlot(options_.slot);
  if (!slot) return tl::unexpected(slot.error());
  if (slot->has_value()) {
    const SlotState& state = **slot;
    if (state.slot_type != "logical" || state.plugin != "pgoutput") {
      *fatal = true;
      return InvalidArgument(fmt::format(
          "replication slot {} is not a logical pgoutput slot ({} {}): choose another with "
          "--source-slot",
          options_.slot, state.slot_type, state.plugin));
    }
    if (!backfill && state.confirmed_flush &&
        static_cast<int64_t>(*state.confirmed_flush) > session.MinPosition()) {
      spdlog::warn(
          "postgres source: slot {} is at {}, past tally's position {}: changes in "
          "between are gone; counting again from a snapshot",
          options_.slot, FormatLsn(*state.confirmed_flush),
          FormatLsn(static_cast<Lsn>(session.MinPosition())));
      backfill = true;
    }
  } else if (!backfill) {
    spdlog::warn(
        "postgres source: slot {} does not exist (dropped?): counting again from a "
        "snapshot",
        options_.slot);
    backfill = true;
  }
  if (backfill) {
    if (auto s = Backfill(session, slot->has_value()); !s) return s;
    if (stopping()) return OkStatus();
  }
  const Lsn start = static_cast<Lsn>(session.MinPosition());
  if (auto s = stream.Start(options_.slot, start, options_.publication); !s) return s;
  session.acked = start;
  spdlog::info("postgres source: streaming from {} (slot {}, publication {})", FormatLsn(start),
               options_.slot, options_.publication);
  applied_->Add(0, start);  // stored, so durable
  {
    std::lock_guard lock(mutex_);
    stats_.state = "streaming";
    stats_.connected = true;
    caught_up_at_ = 0;
  }
  return Stream(session, fatal);
}

}  // namespace tally::postgres
