// VerificationHold: stops the source streams at one position while `tally verify`
// compares the counters with the database's snapshot of that position.
//
// Hold(p) sets the hold: from then on a source transaction above p waits before it is
// applied (WaitUntilDue) until Release(). Hold(p, replace) moves a standing hold to p in one
// step (tally verify's first hold, set before its snapshot's position was known, moved there):
// no transaction above both positions slips through between them. The hold is *reached* once
// everything up to p is applied: when a transaction above p arrives and waits (the stream delivers
// in order, so all before it are applied), or when the stream reports (MarkStreamAt) that it has
// delivered everything up to p. tally verify reads the counters once the hold is reached,
// repairs what differs and releases. One hold at a time.
//
// Callers: DerivedCounters, for the servers' COUNTER.HOLD / COUNTER.RELEASE (driven by
// tally verify) and the PostgreSQL source (MarkStreamAt, WaitUntilDue within
// ApplyTransaction).
//
// Thread-safety: every method may be called from any thread; one internal mutex. Only
// WaitUntilDue blocks: call it holding no other lock (it waits for a Release that may come
// from any thread, and the apply lock must stay free for DDL meanwhile).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/status.h"

namespace tally::derived {

// A verification hold as its holder sees it.
struct HoldState {
  bool held = false;
  int64_t position = 0;
  bool reached = false;  // every source transaction up to `position` is applied
};

// What COUNTER.HOLD shows: the hold, and the highest position any source has applied. Above
// the held position, a transaction past it was applied before the hold landed (tally verify
// then takes a new snapshot).
struct HoldReport {
  HoldState hold;
  int64_t applied = 0;
};

class VerificationHold {
 public:
  // Sets the hold at `position`; with `replace`, also in place of one that stands (not
  // reached again until everything up to the new position is). kUnavailable while another
  // hold stands and `replace` is not given.
  Status Hold(int64_t position, bool replace = false);
  // The stream has delivered (and applied) everything up to `position`.
  void MarkStreamAt(int64_t position);
  HoldState state() const;
  // Ends the hold, if any, and lets the waiting transaction go on.
  void Release();

  // Called by the apply of a source transaction at `position` (never 0: a backfill chunk
  // is not held), before it takes any lock: returns at once unless a hold below `position`
  // stands; else marks the hold reached and blocks until it is released.
  void WaitUntilDue(int64_t position);

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  HoldState hold_;  // guarded by mutex_
};

}  // namespace tally::derived
