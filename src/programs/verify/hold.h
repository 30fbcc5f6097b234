// The verification hold that `tally verify` sets on tallyd (COUNTER.HOLD <lsn>): tallyd
// applies the source transactions up to the held position and makes those above it wait.
// A hold left behind would stop tallyd's source until someone sends COUNTER.RELEASE, so a
// hold set here is released whatever happens: by Release on every way out of verify (on a
// fresh connection when the main one broke), and by the signal thread on SIGINT, SIGTERM
// and SIGHUP.
//
// Thread-safety: a Hold is shared by the main thread and the signal thread; every method
// may be called from either.
#pragma once

#include <csignal>
#include <mutex>
#include <string>

#include "core/lsn.h"
#include "core/status.h"
#include "programs/verify/resp_client.h"

namespace tally::verify {

// What COUNTER.HOLD without an argument shows.
struct HoldReport {
  bool held = false;
  std::string position;  // the held position as tallyd spells it
  bool reached = false;  // everything up to the position is applied
  std::string applied;   // the highest source position applied, as tallyd spells it

  // Held, at `lsn`.
  bool HeldAt(Lsn lsn) const;
  // A source has applied a transaction past `lsn`.
  bool AppliedPast(Lsn lsn) const;
};

// Asks tallyd (COUNTER.HOLD) what it holds.
Result<HoldReport> ReadHold(RespClient& tally);

class Hold {
 public:
  // `server` and `credentials` say where and as whom a fresh connection releases the hold.
  Hold(std::string server, Credentials credentials);
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;

  // Sets the hold at `lsn` on `tally`. It is ours to release once tallyd has said OK; an
  // error reply (someone else's hold stands) is the error "tallyd: COUNTER.HOLD <lsn>: …".
  Status Set(RespClient& tally, Lsn lsn);

  // Moves our hold to `lsn` in one step (COUNTER.HOLD <lsn> REPLACE), so that no transaction
  // above both positions slips through between them.
  Status Move(RespClient& tally, Lsn lsn);

  // Releases our hold, when we have one: on `tally`, or on a fresh connection when `tally`
  // is null or its connection broke.
  Status Release(RespClient* tally);

  // Blocks SIGINT, SIGTERM and SIGHUP and starts the thread that takes them: it releases
  // our hold on a connection of its own, says so on stderr and exits with status 2 (a
  // temporary replication slot goes with the process's connections).
  // REQUIRES: called once, before any other thread starts (threads inherit the blocked
  // signals); the Hold lives until the process exits.
  void ReleaseOnSignals();

 private:
  // REQUIRES: mutex_ held.
  Status ReleaseOnFreshConnection();
  void TakeSignals(sigset_t set);

  const std::string server_;
  const Credentials credentials_;
  std::mutex mutex_;
  bool ours_ = false;  // a hold we set may be in place; guarded by mutex_
};

}  // namespace tally::verify
