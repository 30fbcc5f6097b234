// HotKeys: the counters written most over the last minute, with their writes per second,
// so that a hot key is found without guessing (INFO's # Hotkeys, GET /v1/hot, /metrics).
//
// Where the figures come from. Every write to the keyspace (a Redis command, a fold of a
// worker's IncrementBuffer, a derived counter's increment) passes View::ForWrite under its
// stripe's lock, and each stripe feeds its WriteSketch there (see Keyspace: one write in
// kWriteSampleEvery is offered, weighted with the writes since the previous one, so the hot
// path pays a counter and a branch). A key in one stripe is in no other, so the stripes'
// sketches together hold every key that takes more than a small share of its stripe's
// writes.
//
// Windows. Tick(), once a second on the HotKeys thread (or by a test), drains every
// stripe's sketch into the window of the current second of the keyspace's clock, keeping
// its kKeptPerWindow most-written keys; windows older than kWindowSeconds are dropped.
// Top() sums the windows of the last kWindowSeconds and divides by the seconds they cover:
// the time since Start() (or, for an object ticked by hand, since it was made), at most
// kWindowSeconds. Not since construction: the Engine makes its HotKeys before it loads the
// store, which may take long, and the first minute's rates must not count the load's time.
//
// Thread-safety: Tick and Top from any thread; Start and Stop from one.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/periodic_thread.h"
#include "engine/keyspace.h"

namespace tally::engine {

struct HotKey {
  std::string key;
  uint64_t writes = 0;           // over the window
  double writes_per_second = 0;  // writes / the seconds the window covers
};

class HotKeys {
 public:
  static constexpr int64_t kWindowSeconds = 60;
  static constexpr size_t kKeptPerWindow = 256;

  // Reads `keyspace`'s sketches and clock; `keyspace` must outlive this object.
  explicit HotKeys(Keyspace* keyspace);
  ~HotKeys();  // Stop()
  HotKeys(const HotKeys&) = delete;
  HotKeys& operator=(const HotKeys&) = delete;

  // Starts measuring anew: drops the writes sampled so far and the windows, takes now as
  // the start of the rates' time, and starts the thread that calls Tick() once a second.
  void Start();
  // Stops the thread; Top() goes on answering from the windows it left.
  void Stop();

  // Drains the stripes' sketches into the current second's window and drops old windows.
  void Tick();

  // The `n` most-written keys of the last kWindowSeconds, most first (ties by key), leaving
  // out keys `hide` accepts (tally's own records).
  std::vector<HotKey> Top(size_t n, const std::function<bool(std::string_view)>& hide = {}) const;

 private:
  struct Window {
    int64_t second = 0;  // of the keyspace's clock
    std::vector<KeyWrites> keys;
  };
  Keyspace* const keyspace_;
  mutable std::mutex mutex_;
  int64_t started_ms_;              // guarded by mutex_; the rates' time starts here
  std::deque<Window> windows_;      // guarded by mutex_; oldest first
  std::vector<KeyWrites> scratch_;  // Tick's, guarded by mutex_
  PeriodicThread ticker_;           // calls Tick(); last, so that it stops first
};

}  // namespace tally::engine
