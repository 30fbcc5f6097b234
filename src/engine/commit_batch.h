// CommitBatch: what one group commit makes durable, in a form any store can write
// atomically. The engine fills it; a Persistence implementation (persistence.h) writes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tally::engine {

// A counter's durable state: its value and, when it has one, its expiry deadline.
struct CounterRecord {
  int64_t value = 0;
  int64_t deadline_ms = 0;  // Unix milliseconds; 0 = no expiry
};

// The operations of one atomic commit, applied in this order: clear all counters (when
// `clear_all`), then `deletes`, then `puts`. Keys are stored back to back in `key_bytes`.
class CommitBatch {
 public:
  struct Put {
    uint32_t key_offset;
    uint32_t key_length;
    CounterRecord record;
  };

  void Clear() {
    clear_all_ = false;
    key_bytes_.clear();
    deletes_.clear();
    puts_.clear();
    epoch_ = 0;
  }
  bool empty() const { return !clear_all_ && deletes_.empty() && puts_.empty(); }

  void ClearAll() { clear_all_ = true; }
  // For a caller that emptied what the clear would: applying it again is a walk for nothing.
  void CancelClearAll() { clear_all_ = false; }
  void AddDelete(std::string_view key) { deletes_.push_back(Store(key)); }
  void AddPut(std::string_view key, CounterRecord record) {
    const auto [offset, length] = Store(key);
    puts_.push_back(Put{offset, length, record});
  }

  bool clear_all() const { return clear_all_; }
  size_t delete_count() const { return deletes_.size(); }
  size_t put_count() const { return puts_.size(); }
  std::string_view delete_key(size_t i) const {
    return {key_bytes_.data() + deletes_[i].first, deletes_[i].second};
  }
  std::string_view put_key(size_t i) const {
    return {key_bytes_.data() + puts_[i].key_offset, puts_[i].key_length};
  }
  const CounterRecord& put_record(size_t i) const { return puts_[i].record; }

  // The commit epoch this batch makes durable.
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }

 private:
  std::pair<uint32_t, uint32_t> Store(std::string_view key) {
    const auto offset = static_cast<uint32_t>(key_bytes_.size());
    key_bytes_.append(key);
    return {offset, static_cast<uint32_t>(key.size())};
  }

  bool clear_all_ = false;
  std::string key_bytes_;
  std::vector<std::pair<uint32_t, uint32_t>> deletes_;
  std::vector<Put> puts_;
  uint64_t epoch_ = 0;
};

}  // namespace tally::engine
