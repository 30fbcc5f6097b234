#include "programs/verify/progress.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tally::verify {

std::string Thousands(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string Plural(uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", Thousands(n), n == 1 ? one : many);
}

Progress::Progress(bool enabled, std::string counter, int64_t expected_groups)
    : enabled_(enabled), counter_(std::move(counter)), total_(expected_groups) {}

void Progress::SourceRows(uint64_t n) {
  source_rows_ = n;
  Draw(false);
}

void Progress::TallyGroups(uint64_t n) {
  tally_groups_ = n;
  in_tally_ = true;
  Draw(false);
}

void Progress::Finish() {
  if (!shown_) return;
  Draw(true);
  std::fputc('\n', stderr);
  std::fflush(stderr);
  shown_ = false;
  enabled_ = false;
}

void Progress::Draw(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && shown_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  shown_ = true;
  std::string line = fmt::format("\r{}: source {} rows", counter_, Thousands(source_rows_));
  if (in_tally_) {
    const uint64_t total =
        std::max<uint64_t>(static_cast<uint64_t>(std::max<int64_t>(total_, 0)), tally_groups_);
    const int width = 30;
    const int filled = total == 0 ? width : static_cast<int>(width * tally_groups_ / total);
    line +=
        fmt::format(", tally {}/{} groups [{}{}] {}%", Thousands(tally_groups_), Thousands(total),
                    std::string(filled, '#'), std::string(width - filled, '.'),
                    total == 0 ? 100 : 100 * tally_groups_ / total);
  }
  line += "   ";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace tally::verify
