#include "engine/subscriptions.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "engine/key_hash.h"

namespace tally::engine {
namespace {

// Debian's abseil has its own string_view: heterogeneous lookups take that one.
absl::string_view Absl(std::string_view text) { return {text.data(), text.size()}; }

// Keys a prefix snapshot's scan visits per step (each step locks one stripe at a time).
constexpr size_t kSnapshotScanStep = 1024;

void RaiseTo(std::atomic<uint64_t>& value, uint64_t at_least) {
  uint64_t current = value.load(std::memory_order_relaxed);
  while (current < at_least &&
         !value.compare_exchange_weak(current, at_least, std::memory_order_release,
                                      std::memory_order_relaxed)) {
  }
}

}  // namespace

SubscriptionHub::SubscriptionHub(Keyspace* keyspace, SubscriptionOptions options)
    : keyspace_(keyspace), options_(std::move(options)) {
  std::lock_guard lock(feed_->mutex);
  feed_->hub = this;
}

SubscriptionHub::~SubscriptionHub() {
  Stop();
  std::lock_guard lock(feed_->mutex);
  feed_->hub = nullptr;
}

void SubscriptionHub::Attach(Committer& committer) {
  SetDurableEpoch(committer.durable_epoch());
  committer.AddCommitObserver([feed = feed_](const CommitBatch& batch, uint64_t) {
    std::lock_guard lock(feed->mutex);
    if (feed->hub != nullptr) feed->hub->OnCommit(batch);
  });
}

void SubscriptionHub::Start() {
  std::lock_guard lock(flusher_mutex_);
  if (flusher_.joinable()) return;
  stopping_ = false;
  flusher_ = std::thread([this] { RunFlusher(); });
}

void SubscriptionHub::Stop() {
  {
    std::lock_guard lock(flusher_mutex_);
    stopping_ = true;
  }
  flusher_wake_.notify_all();
  if (flusher_.joinable()) flusher_.join();
}

void SubscriptionHub::RunFlusher() {
  const auto interval = std::chrono::milliseconds(std::max(1, options_.interval_ms));
  auto next = std::chrono::steady_clock::now() + interval;
  std::unique_lock lock(flusher_mutex_);
  while (!flusher_wake_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    Flush();
    lock.lock();
    // The next tick one interval after this one, not after the flush ended; a tick that
    // fell behind (a long flush) starts the count again rather than catching up in a burst.
    const auto now = std::chrono::steady_clock::now();
    next = std::max(next + interval, now);
  }
}

SubscriberId SubscriptionHub::AddSubscriber(std::shared_ptr<SubscriberSink> sink) {
  std::lock_guard lock(mutex_);
  const SubscriberId id = next_id_++;
  auto subscriber = std::make_unique<Subscriber>();
  subscriber->id = id;
  subscriber->sink = std::move(sink);
  subscribers_.emplace(id, std::move(subscriber));
  subscriber_count_.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void SubscriptionHub::RemoveSubscriber(SubscriberId id) {
  std::lock_guard lock(mutex_);
  if (Subscriber* subscriber = Find(id); subscriber != nullptr) Erase(*subscriber);
}

SubscriptionHub::Subscriber* SubscriptionHub::Find(SubscriberId id) {
  const auto it = subscribers_.find(id);
  return it == subscribers_.end() ? nullptr : it->second.get();
}

Status SubscriptionHub::Subscribe(SubscriberId id, std::span<const std::string> keys,
                                  std::span<const std::string> prefixes) {
  const auto refused = [](const Subscriber* subscriber) -> Status {
    if (subscriber == nullptr) {
      return MakeError(ErrorCode::kUnavailable, "the subscriber was disconnected");
    }
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("the subscriber was disconnected: {}", subscriber->dropped));
  };
  {
    std::lock_guard lock(mutex_);
    Subscriber* subscriber = Find(id);
    if (subscriber == nullptr || !subscriber->dropped.empty()) return refused(subscriber);
    // Registered before the current values are read: no change after the read is missed.
    for (const std::string& key : keys) {
      if (!subscriber->keys.insert(key).second) continue;
      exact_[key].push_back(subscriber);
      ++subscriptions_;
    }
    for (const std::string& prefix : prefixes) {
      if (!subscriber->prefixes.insert(prefix).second) continue;
      auto& followers = prefixes_[prefix];
      if (followers.empty()) ++prefix_lengths_[prefix.size()];
      followers.push_back(subscriber);
      ++subscriptions_;
    }
    ++subscriber->priming;
  }

  const std::vector<Snapshot> current = ReadCurrent(keys, prefixes);

  std::lock_guard lock(mutex_);
  Subscriber* subscriber = Find(id);
  if (subscriber == nullptr || !subscriber->dropped.empty()) return refused(subscriber);
  for (const Snapshot& entry : current) {
    Offer(*subscriber, entry.key, entry.value, entry.epoch, /*forced=*/true);
  }
  --subscriber->priming;
  MarkDirty(*subscriber);
  DropOverflowed();
  if (!subscriber->dropped.empty()) return refused(subscriber);
  return OkStatus();
}

std::vector<SubscriptionHub::Snapshot> SubscriptionHub::ReadCurrent(
    std::span<const std::string> keys, std::span<const std::string> prefixes) {
  const auto hidden = [this](std::string_view key) {
    return options_.hidden && options_.hidden(key);
  };
  std::vector<Snapshot> current;
  // One key at a time, each under its own lock: the epoch read with a value is the newest
  // its stripe was written in, which is exactly what an update must reach to replace it.
  const auto read = [&](const std::string& key, bool missing_is_zero) {
    const HashedKey hashed(key);
    View view = keyspace_->Lock(hashed);
    const std::optional<int64_t> value = view.Get(hashed);
    if (!value && !missing_is_zero) return;
    current.push_back(Snapshot{key, value.value_or(0), view.required_epoch()});
  };
  for (const std::string& key : keys) {
    if (!hidden(key)) read(key, /*missing_is_zero=*/true);
  }
  std::vector<std::string> found;
  for (const std::string& prefix : prefixes) {
    found.clear();
    uint64_t cursor = 0;
    do {
      cursor = keyspace_->Scan(
          cursor, kSnapshotScanStep,
          [&](std::string_view key) { return key.starts_with(prefix) && !hidden(key); }, &found);
    } while (cursor != 0 && found.size() < options_.snapshot_max_keys);
    if (found.size() > options_.snapshot_max_keys) found.resize(options_.snapshot_max_keys);
    for (const std::string& key : found) read(key, /*missing_is_zero=*/false);
  }
  return current;
}

void SubscriptionHub::Unsubscribe(SubscriberId id, std::span<const std::string> keys,
                                  std::span<const std::string> prefixes) {
  std::lock_guard lock(mutex_);
  Subscriber* subscriber = Find(id);
  if (subscriber == nullptr) return;
  for (const std::string& key : keys) {
    if (subscriber->keys.erase(key) == 0) continue;
    Unindex(*subscriber, key, false);
    --subscriptions_;
  }
  for (const std::string& prefix : prefixes) {
    if (subscriber->prefixes.erase(prefix) == 0) continue;
    Unindex(*subscriber, prefix, true);
    --subscriptions_;
  }
  Prune(*subscriber);
}

void SubscriptionHub::UnsubscribeAll(SubscriberId id) {
  std::lock_guard lock(mutex_);
  Subscriber* subscriber = Find(id);
  if (subscriber == nullptr) return;
  for (const std::string& key : subscriber->keys) Unindex(*subscriber, key, false);
  for (const std::string& prefix : subscriber->prefixes) Unindex(*subscriber, prefix, true);
  subscriptions_ -= subscriber->keys.size() + subscriber->prefixes.size();
  subscriber->keys.clear();
  subscriber->prefixes.clear();
  Prune(*subscriber);
}

void SubscriptionHub::Unindex(Subscriber& subscriber, std::string_view key, bool prefix) {
  auto& index = prefix ? prefixes_ : exact_;
  const auto it = index.find(Absl(key));
  if (it == index.end()) return;
  std::erase(it->second, &subscriber);
  if (!it->second.empty()) return;
  index.erase(it);
  if (prefix) {
    const auto length = prefix_lengths_.find(key.size());
    if (--length->second == 0) prefix_lengths_.erase(length);
  }
}

bool SubscriptionHub::Follows(const Subscriber& subscriber, std::string_view key) const {
  if (subscriber.keys.contains(Absl(key))) return true;
  return std::ranges::any_of(subscriber.prefixes,
                             [&](const std::string& prefix) { return key.starts_with(prefix); });
}

void SubscriptionHub::Prune(Subscriber& subscriber) {
  for (auto it = subscriber.pending.begin(); it != subscriber.pending.end();) {
    if (Follows(subscriber, it->first)) {
      ++it;
    } else {
      subscriber.pending.erase(it++);
      --pending_keys_;
    }
  }
  for (auto it = subscriber.sent.begin(); it != subscriber.sent.end();) {
    if (Follows(subscriber, it->first)) {
      ++it;
    } else {
      subscriber.sent.erase(it++);
    }
  }
}

template <typename Visit>
void SubscriptionHub::ForEachMatch(std::string_view key, Visit&& visit) {
  if (const auto it = exact_.find(Absl(key)); it != exact_.end()) {
    for (Subscriber* subscriber : it->second) visit(*subscriber);
  }
  for (const auto& [length, count] : prefix_lengths_) {
    if (length > key.size()) break;
    const auto it = prefixes_.find(Absl(key.substr(0, length)));
    if (it == prefixes_.end()) continue;
    for (Subscriber* subscriber : it->second) visit(*subscriber);
  }
}

void SubscriptionHub::Offer(Subscriber& subscriber, std::string_view key, int64_t value,
                            uint64_t epoch, bool forced) {
  auto it = subscriber.pending.find(Absl(key));
  if (it == subscriber.pending.end()) {
    it = subscriber.pending.emplace(std::string(key), Pending{value, epoch, forced}).first;
    ++pending_keys_;
    if (subscriber.pending.size() > options_.max_pending && subscriber.dropped.empty() &&
        std::ranges::find(overflowed_, &subscriber) == overflowed_.end()) {
      overflowed_.push_back(&subscriber);
    }
  } else if (it->second.epoch > epoch) {
    // A newer value (read by Subscribe) is pending: this one is older, or the same.
    it->second.forced = it->second.forced || forced;
    return;
  } else {
    it->second = Pending{value, epoch, it->second.forced || forced};
  }
  MarkDirty(subscriber);
}

void SubscriptionHub::MarkDirty(Subscriber& subscriber) {
  if (subscriber.dirty) return;
  subscriber.dirty = true;
  dirty_.push_back(&subscriber);
}

void SubscriptionHub::DropOverflowed() {
  for (Subscriber* subscriber : overflowed_) {
    Drop(*subscriber,
         fmt::format("more than {} counters waiting to be sent at once (subscriber-max-pending): "
                     "read faster, or follow fewer counters",
                     options_.max_pending));
  }
  overflowed_.clear();
}

void SubscriptionHub::Drop(Subscriber& subscriber, std::string reason) {
  for (const std::string& key : subscriber.keys) Unindex(subscriber, key, false);
  for (const std::string& prefix : subscriber.prefixes) Unindex(subscriber, prefix, true);
  subscriptions_ -= subscriber.keys.size() + subscriber.prefixes.size();
  subscriber.keys.clear();
  subscriber.prefixes.clear();
  pending_keys_ -= subscriber.pending.size();
  // Given back at once: a dropped subscriber holds no memory until its sink is told.
  absl::flat_hash_map<std::string, Pending>().swap(subscriber.pending);
  absl::flat_hash_map<std::string, int64_t>().swap(subscriber.sent);
  subscriber.dropped = std::move(reason);
  ++disconnects_;
  MarkDirty(subscriber);
}

void SubscriptionHub::SetDurableEpoch(uint64_t epoch) { RaiseTo(durable_epoch_, epoch); }

void SubscriptionHub::OnCommit(const CommitBatch& batch) {
  const uint64_t epoch = batch.epoch();
  if (subscriber_count_.load(std::memory_order_acquire) == 0) {
    // A subscriber registering now reads current values newer than this batch.
    RaiseTo(durable_epoch_, epoch);
    return;
  }
  const auto hidden = [this](std::string_view key) {
    return options_.hidden && options_.hidden(key);
  };
  std::lock_guard lock(mutex_);
  if (batch.clear_all()) {
    // FLUSHALL comes first in a batch: every value sent or pending before it is now 0.
    for (auto& [id, subscriber] : subscribers_) {
      for (auto& [key, pending] : subscriber->pending) {
        if (pending.epoch <= epoch) pending = Pending{0, epoch, pending.forced};
      }
      for (const auto& [key, value] : subscriber->sent) {
        Offer(*subscriber, key, 0, epoch, /*forced=*/false);
      }
    }
  }
  for (size_t i = 0; i < batch.delete_count(); ++i) {
    const std::string_view key = batch.delete_key(i);
    if (hidden(key)) continue;
    ForEachMatch(key, [&](Subscriber& subscriber) { Offer(subscriber, key, 0, epoch, false); });
  }
  for (size_t i = 0; i < batch.put_count(); ++i) {
    const std::string_view key = batch.put_key(i);
    if (hidden(key)) continue;
    const int64_t value = batch.put_record(i).value;
    ForEachMatch(key, [&](Subscriber& subscriber) { Offer(subscriber, key, value, epoch, false); });
  }
  DropOverflowed();
  RaiseTo(durable_epoch_, epoch);
}

void SubscriptionHub::Flush() {
  // One subscriber at a time under the lock: the committing thread (OnCommit) waits for at
  // most one subscriber's updates, however many subscribers there are.
  std::vector<SubscriberId> due;
  {
    std::lock_guard lock(mutex_);
    due.reserve(dirty_.size());
    for (Subscriber* subscriber : dirty_) {
      subscriber->dirty = false;
      due.push_back(subscriber->id);
    }
    dirty_.clear();
  }
  for (const SubscriberId id : due) {
    std::shared_ptr<SubscriberSink> sink;
    std::optional<SubscriptionDelivery> delivery;
    std::string dropped;
    {
      std::lock_guard lock(mutex_);
      Subscriber* subscriber = Find(id);
      if (subscriber == nullptr) continue;
      if (!subscriber->dropped.empty()) {
        sink = std::move(subscriber->sink);
        dropped = std::move(subscriber->dropped);
        Erase(*subscriber);
      } else {
        delivery = TakeDue(*subscriber);
        if (delivery) sink = subscriber->sink;
      }
    }
    if (!dropped.empty()) {
      sink->Disconnect(std::move(dropped));
    } else if (delivery) {
      sink->Deliver(std::move(*delivery));
    }
  }
}

std::optional<SubscriptionDelivery> SubscriptionHub::TakeDue(Subscriber& subscriber) {
  if (subscriber.priming > 0 || subscriber.in_flight->load(std::memory_order_acquire)) {
    MarkDirty(subscriber);  // the next tick, with whatever coalesced meanwhile
    return std::nullopt;
  }
  const uint64_t durable = durable_epoch_.load(std::memory_order_acquire);
  std::vector<SubscriptionUpdate> updates;
  for (auto it = subscriber.pending.begin(); it != subscriber.pending.end();) {
    const Pending& pending = it->second;
    if (pending.epoch > durable) {
      ++it;  // read by Subscribe from an epoch not durable yet
      continue;
    }
    const auto sent = subscriber.sent.find(it->first);
    const int64_t last = sent == subscriber.sent.end() ? 0 : sent->second;
    if (pending.forced || pending.value != last) {
      updates.push_back(SubscriptionUpdate{it->first, pending.value});
      if (pending.value == 0) {
        if (sent != subscriber.sent.end()) subscriber.sent.erase(sent);
      } else if (sent != subscriber.sent.end()) {
        sent->second = pending.value;
      } else {
        subscriber.sent.emplace(it->first, pending.value);
      }
    }
    subscriber.pending.erase(it++);
    --pending_keys_;
  }
  if (!subscriber.pending.empty()) MarkDirty(subscriber);
  if (updates.empty()) return std::nullopt;
  updates_sent_ += updates.size();
  subscriber.in_flight->store(true, std::memory_order_release);
  return SubscriptionDelivery(std::move(updates), subscriber.in_flight);
}

void SubscriptionHub::Erase(Subscriber& subscriber) {
  for (const std::string& key : subscriber.keys) Unindex(subscriber, key, false);
  for (const std::string& prefix : subscriber.prefixes) Unindex(subscriber, prefix, true);
  subscriptions_ -= subscriber.keys.size() + subscriber.prefixes.size();
  pending_keys_ -= subscriber.pending.size();
  if (subscriber.dirty) std::erase(dirty_, &subscriber);
  std::erase(overflowed_, &subscriber);
  subscribers_.erase(subscriber.id);
  subscriber_count_.fetch_sub(1, std::memory_order_relaxed);
}

SubscriptionStats SubscriptionHub::stats() const {
  std::lock_guard lock(mutex_);
  SubscriptionStats stats;
  stats.subscribers = subscribers_.size();
  stats.subscriptions = subscriptions_;
  stats.pending_keys = pending_keys_;
  stats.updates_sent = updates_sent_;
  stats.disconnects = disconnects_;
  stats.queue_limit_disconnects = queue_limit_disconnects_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace tally::engine
