// TextArena: copies of strings in blocks that never move, for the text cells and ids of
// decoded changes (change_json.h). simdjson's parse_many reuses its string buffer for each
// value of a stream, so a decoded change cannot view it; the arena keeps one block sized for
// the largest body seen, so a warm decoder allocates nothing. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

namespace tally::derived {

class TextArena {
 public:
  // Drops every copy; keeps one block of at least `hint` bytes.
  void Reset(size_t hint) {
    if (blocks_.empty() || capacity_ < hint) {
      blocks_.clear();
      capacity_ = std::max(hint, kMinBlock);
      blocks_.push_back(std::make_unique_for_overwrite<char[]>(capacity_));
    } else {
      blocks_.resize(1);
    }
    next_ = blocks_.front().get();
    left_ = capacity_;
  }

  // A copy of `text`, valid until the next Reset.
  std::string_view Copy(std::string_view text) {
    if (text.size() > left_) {
      const size_t size = std::max(text.size(), kMinBlock);
      blocks_.push_back(std::make_unique_for_overwrite<char[]>(size));
      next_ = blocks_.back().get();
      left_ = size;
    }
    if (!text.empty()) std::memcpy(next_, text.data(), text.size());
    const std::string_view copy(next_, text.size());
    next_ += text.size();
    left_ -= text.size();
    return copy;
  }

 private:
  static constexpr size_t kMinBlock = 4096;
  std::vector<std::unique_ptr<char[]>> blocks_;
  size_t capacity_ = 0;  // of blocks_.front()
  char* next_ = nullptr;
  size_t left_ = 0;
};

}  // namespace tally::derived
