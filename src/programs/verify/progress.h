// What `tally verify` prints besides its results: numbers with thousands separators, counts
// with their noun, and a progress line on stderr while a counter is read.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace tally::verify {

// 1234567 as "1,234,567".
std::string Thousands(uint64_t n);

// "1 counter", "1,200 counters".
std::string Plural(uint64_t n, std::string_view one, std::string_view many);

// A progress line on stderr: rows read from the source, then groups read from tally out of
// the counter's group count. At most ten updates a second; a final line per counter (at
// Finish, or when it goes). Draws nothing when not enabled.
class Progress {
 public:
  Progress(bool enabled, std::string counter, int64_t expected_groups);
  ~Progress() { Finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void SourceRows(uint64_t n);
  void TallyGroups(uint64_t n);
  // Draws the last state and ends the line. Idempotent.
  void Finish();

 private:
  void Draw(bool force);

  bool enabled_;
  bool shown_ = false;
  std::string counter_;
  int64_t total_;
  uint64_t source_rows_ = 0;
  uint64_t tally_groups_ = 0;
  bool in_tally_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace tally::verify
