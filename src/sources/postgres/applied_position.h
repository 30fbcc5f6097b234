// AppliedPosition: how far a PostgreSQL source is applied *and durable* in tally, the
// position PostgresSource reports as applied_lsn. It moves as soon as the commit holding a
// transaction is durable, whoever makes it durable (a reader waiting for a value, the
// committer's timer, the stream's thread when the stream is idle), whatever the cadence at
// which the slot is told (PostgresSourceOptions::ack_interval).
//
// The stream's thread calls Add after applying a transaction (its commit's end LSN, and the
// epoch ApplyTransaction wrote it in) and whenever the stream shows that everything up to a
// position is processed with nothing written for it (epoch 0: a keepalive between
// transactions, a transaction that touched no followed table). The engine's committer calls
// Durable with each epoch once it is durable (Committer::AddDurableListener). A position is
// applied once its epoch and every earlier one are durable; an epoch-0 position waits
// behind the positions added before it. Positions and epochs only grow.
//
// Thread-safety: every method from any thread. One mutex, held briefly: Durable runs on the
// committing thread while the commit is announced.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

#include "sources/postgres/pgoutput.h"  // Lsn

namespace tally::postgres {

class AppliedPosition {
 public:
  // Everything up to `position` is applied, written in epochs up to `epoch` (0: nothing
  // written for it).
  void Add(uint64_t epoch, Lsn position);
  // Every epoch up to `epoch` is durable.
  void Durable(uint64_t epoch);
  // The largest position whose changes are all durable; 0 before any.
  Lsn position() const;

 private:
  // Moves position_ over the waiting positions whose epoch is durable. REQUIRES: mutex_.
  void Advance();

  mutable std::mutex mutex_;
  uint64_t durable_ = 0;                          // every epoch up to here is durable
  std::deque<std::pair<uint64_t, Lsn>> waiting_;  // (epoch, position), both increasing
  Lsn position_ = 0;
};

}  // namespace tally::postgres
