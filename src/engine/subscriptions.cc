#include "engine/subscriptions.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "core/absl_string.h"
#include "engine/key_hash.h"

namespace tally::engine {
namespace {

// Keys a prefix snapshot's scan visits per step (each step locks one stripe at a time).
constexpr size_t kSnapshotScanStep = 1024;

void RaiseTo(std::atomic<uint64_t>& value, uint64_t at_least) {
  uint64_t current = value.load(std::memory_order_relaxed);
  while (current < at_least &&
         !value.compare_exchange_weak(current, at_least, std::memory_order_release,
                                      std::memory_order_relaxed)) {
  }
}

// Adds what `more` asked for to `into`.
void Merge(AskedBy& into, const AskedBy& more) {
  into.key = into.key || more.key;
  for (const std::string& prefix : more.prefixes) {
    if (std::ranges::find(into.prefixes, prefix) == into.prefixes.end()) {
      into.prefixes.push_back(prefix);
    }
  }
}

// Calls `test` with each prefix of the stored `key` whose length is in `lengths` (a length ->
// count map, ascending) and which may follow the key (its own database only, databases.h),
// shortest first, until `test` returns true; returns whether one did.
template <typename Test>
bool AnyFollowingPrefix(std::string_view key, const std::map<size_t, size_t>& lengths,
                        Test&& test) {
  for (auto it = lengths.lower_bound(ShortestPrefixFor(key));
       it != lengths.end() && it->first <= key.size(); ++it) {
    if (test(key.substr(0, it->first))) return true;
  }
  return false;
}

}  // namespace

// --- PrefixSet ---------------------------------------------------------------------------

bool SubscriptionHub::PrefixSet::Insert(const std::string& prefix) {
  if (!prefixes_.insert(prefix).second) return false;
  ++lengths_[prefix.size()];
  return true;
}

bool SubscriptionHub::PrefixSet::Erase(std::string_view prefix) {
  if (prefixes_.erase(Absl(prefix)) == 0) return false;
  const auto length = lengths_.find(prefix.size());
  if (--length->second == 0) lengths_.erase(length);
  return true;
}

bool SubscriptionHub::PrefixSet::contains(std::string_view prefix) const {
  return prefixes_.contains(Absl(prefix));
}

template <typename Visit>
void SubscriptionHub::PrefixSet::ForEachMatch(std::string_view key, Visit&& visit) const {
  AnyFollowingPrefix(key, lengths_, [&](std::string_view prefix) {
    if (const auto it = prefixes_.find(Absl(prefix)); it != prefixes_.end()) visit(*it);
    return false;
  });
}

bool SubscriptionHub::PrefixSet::Matches(std::string_view key) const {
  return AnyFollowingPrefix(
      key, lengths_, [&](std::string_view prefix) { return prefixes_.contains(Absl(prefix)); });
}

// --- SubscriptionHub ---------------------------------------------------------------------

SubscriptionHub::SubscriptionHub(Keyspace* keyspace, SubscriptionOptions options)
    : keyspace_(keyspace),
      options_(std::move(options)),
      flusher_(
          std::chrono::milliseconds(std::max(1, options_.interval_ms)), [this] { Flush(); },
          "subscriptions") {
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
    if (feed->subscribers.load(std::memory_order_acquire) == 0) {
      // A subscriber registering now reads current values that include this batch.
      RaiseTo(feed->durable_epoch, batch.epoch());
      return;
    }
    std::lock_guard lock(feed->mutex);
    if (feed->hub != nullptr) feed->hub->OnCommit(batch);
  });
}

SubscriberId SubscriptionHub::AddSubscriber(std::shared_ptr<SubscriberSink> sink) {
  std::lock_guard lock(mutex_);
  const SubscriberId id = next_id_++;
  auto subscriber = std::make_unique<Subscriber>();
  subscriber->id = id;
  subscriber->sink = std::move(sink);
  subscribers_.emplace(id, std::move(subscriber));
  feed_->subscribers.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void SubscriptionHub::RemoveSubscriber(SubscriberId id) {
  Retired retired;  // freed after the lock
  std::lock_guard lock(mutex_);
  if (Subscriber* subscriber = Find(id); subscriber != nullptr) retired = Erase(*subscriber);
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
    // Counted before anything changes: a refused call follows nothing new.
    absl::flat_hash_set<absl::string_view> new_keys;
    absl::flat_hash_set<absl::string_view> new_prefixes;
    for (const std::string& key : keys) {
      if (!subscriber->keys.contains(key)) new_keys.insert(Absl(key));
    }
    for (const std::string& prefix : prefixes) {
      if (!subscriber->prefixes.contains(prefix)) new_prefixes.insert(Absl(prefix));
    }
    const size_t total = subscriber->keys.size() + subscriber->prefixes.size() + new_keys.size() +
                         new_prefixes.size();
    if (total > options_.max_subscriptions) {
      return MakeError(
          ErrorCode::kInvalidArgument,
          fmt::format("too many subscriptions: at most {} keys and prefixes per subscriber "
                      "(subscriber-max-subscriptions), this would make {}",
                      options_.max_subscriptions, total));
    }
    // Registered before the current values are read: no change after the read is missed.
    for (const std::string& key : keys) {
      if (!subscriber->keys.insert(key).second) continue;
      exact_[key].push_back(subscriber);
      ++subscriptions_;
    }
    for (const std::string& prefix : prefixes) {
      if (!subscriber->prefixes.Insert(prefix)) continue;
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
    // Only what is still followed: an Unsubscribe() may have come in between.
    if (Follows(*subscriber, entry.key)) {
      Offer(*subscriber, entry.key, entry.value, entry.epoch, &entry.asked);
    }
  }
  --subscriber->priming;
  MarkDirty(*subscriber);
  DropOverflowed();
  if (!subscriber->dropped.empty()) return refused(subscriber);
  return OkStatus();
}

std::vector<SubscriptionHub::Snapshot> SubscriptionHub::ReadCurrent(
    std::span<const std::string> keys, std::span<const std::string> prefixes) {
  std::vector<Snapshot> current;
  // One key at a time, each under its own lock: the epoch read with a value is the newest
  // its stripe was written in, which is exactly what an update must reach to replace it.
  const auto read = [&](const std::string& key, bool missing_is_zero, AskedBy asked) {
    const HashedKey hashed(key);
    View view = keyspace_->Lock(hashed);
    const std::optional<int64_t> value = view.Get(hashed);
    if (!value && !missing_is_zero) return;
    current.push_back(Snapshot{key, value.value_or(0), view.required_epoch(), std::move(asked)});
  };
  for (const std::string& key : keys) {
    if (!Hidden(key)) read(key, /*missing_is_zero=*/true, AskedBy{.key = true, .prefixes = {}});
  }
  if (prefixes.empty() || options_.snapshot_max_keys == 0) return current;

  // One scan for every prefix, within a budget of entries visited: a prefix with few keys
  // in a large keyspace costs at most snapshot_max_scan steps, however often it is asked.
  PrefixSet wanted;
  for (const std::string& prefix : prefixes) wanted.Insert(prefix);
  absl::flat_hash_map<std::string, size_t> found_per_prefix;
  size_t prefixes_full = 0;
  const auto match = [&](std::string_view key) {
    if (Hidden(key)) return false;
    bool take = false;
    wanted.ForEachMatch(key, [&](const std::string& prefix) {
      size_t& found = found_per_prefix[prefix];
      if (found == options_.snapshot_max_keys) return;
      take = true;
      if (++found == options_.snapshot_max_keys) ++prefixes_full;
    });
    return take;
  };
  std::vector<std::string> found;
  uint64_t cursor = 0;
  size_t budget = options_.snapshot_max_scan;
  while (budget > 0 && prefixes_full < wanted.size()) {
    const size_t step = std::min(budget, kSnapshotScanStep);
    cursor = keyspace_->Scan(cursor, step, match, &found);
    budget -= step;
    if (cursor == 0) break;
  }
  for (const std::string& key : found) {
    AskedBy asked;
    wanted.ForEachMatch(key, [&](const std::string& prefix) { asked.prefixes.push_back(prefix); });
    read(key, /*missing_is_zero=*/false, std::move(asked));
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
    Prune(*subscriber, key);
  }
  for (const std::string& prefix : prefixes) {
    if (!subscriber->prefixes.Erase(prefix)) continue;
    Unindex(*subscriber, prefix, true);
    --subscriptions_;
    PruneRange(*subscriber, prefix);
  }
}

void SubscriptionHub::UnsubscribeAll(SubscriberId id) {
  Retired retired;  // freed after the lock
  std::lock_guard lock(mutex_);
  if (Subscriber* subscriber = Find(id); subscriber != nullptr) {
    retired = UnindexAll(*subscriber);
  }
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

SubscriptionHub::Retired SubscriptionHub::UnindexAll(Subscriber& subscriber) {
  for (const std::string& key : subscriber.keys) Unindex(subscriber, key, false);
  for (const std::string& prefix : subscriber.prefixes) Unindex(subscriber, prefix, true);
  subscriptions_ -= subscriber.keys.size() + subscriber.prefixes.size();
  pending_keys_ -= subscriber.pending.size();
  Retired retired;
  std::swap(retired.keys, subscriber.keys);
  std::swap(retired.prefixes, subscriber.prefixes);
  std::swap(retired.pending, subscriber.pending);
  std::swap(retired.sent, subscriber.sent);
  return retired;
}

bool SubscriptionHub::Follows(const Subscriber& subscriber, std::string_view key) {
  return subscriber.keys.contains(Absl(key)) || subscriber.prefixes.Matches(key);
}

void SubscriptionHub::Prune(Subscriber& subscriber, std::string_view key) {
  if (Follows(subscriber, key)) return;
  if (const auto it = subscriber.pending.find(key); it != subscriber.pending.end()) {
    subscriber.pending.erase(it);
    --pending_keys_;
  }
  if (const auto it = subscriber.sent.find(key); it != subscriber.sent.end()) {
    subscriber.sent.erase(it);
  }
}

void SubscriptionHub::PruneRange(Subscriber& subscriber, std::string_view prefix) {
  // The keys under a prefix are one range of an ordered map.
  const auto prune = [&](auto& map, bool pending) {
    for (auto it = map.lower_bound(prefix); it != map.end() && it->first.starts_with(prefix);) {
      if (Follows(subscriber, it->first)) {
        ++it;
        continue;
      }
      it = map.erase(it);
      if (pending) --pending_keys_;
    }
  };
  prune(subscriber.pending, /*pending=*/true);
  prune(subscriber.sent, /*pending=*/false);
}

template <typename Visit>
void SubscriptionHub::ForEachMatch(std::string_view key, Visit&& visit) {
  if (const auto it = exact_.find(Absl(key)); it != exact_.end()) {
    for (Subscriber* subscriber : it->second) visit(*subscriber);
  }
  AnyFollowingPrefix(key, prefix_lengths_, [&](std::string_view prefix) {
    if (const auto it = prefixes_.find(Absl(prefix)); it != prefixes_.end()) {
      for (Subscriber* subscriber : it->second) visit(*subscriber);
    }
    return false;
  });
}

void SubscriptionHub::Offer(Subscriber& subscriber, std::string_view key, int64_t value,
                            uint64_t epoch, const AskedBy* asked) {
  auto it = subscriber.pending.find(key);
  if (it == subscriber.pending.end()) {
    it = subscriber.pending.emplace(std::string(key), Pending{value, epoch, std::nullopt}).first;
    ++pending_keys_;
    if (subscriber.pending.size() > options_.max_pending && subscriber.dropped.empty() &&
        std::ranges::find(overflowed_, &subscriber) == overflowed_.end()) {
      overflowed_.push_back(&subscriber);
    }
  } else if (it->second.epoch <= epoch) {
    it->second.value = value;
    it->second.epoch = epoch;
  }
  // else a newer value (read by Subscribe) is pending: this one is older, or the same.
  if (asked != nullptr) {
    if (!it->second.asked) it->second.asked.emplace();
    Merge(*it->second.asked, *asked);
  }
  MarkDirty(subscriber);
}

void SubscriptionHub::MarkDirty(Subscriber& subscriber) {
  if (subscriber.dirty) return;
  subscriber.dirty = true;
  dirty_.push_back(subscriber.id);
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
  // Given back at once (by the flusher, after the lock): a dropped subscriber holds no
  // memory until its sink is told.
  garbage_.push_back(UnindexAll(subscriber));
  subscriber.dropped = std::move(reason);
  ++disconnects_;
  MarkDirty(subscriber);
}

void SubscriptionHub::SetDurableEpoch(uint64_t epoch) { RaiseTo(feed_->durable_epoch, epoch); }

void SubscriptionHub::OnCommit(const CommitBatch& batch) {
  const uint64_t epoch = batch.epoch();
  std::lock_guard lock(mutex_);
  if (batch.clear_all()) {
    // FLUSHALL comes first in a batch: every value sent or pending before it is now 0.
    for (auto& [id, subscriber] : subscribers_) {
      for (auto& [key, pending] : subscriber->pending) {
        if (pending.epoch <= epoch) {
          pending.value = 0;
          pending.epoch = epoch;
        }
      }
      for (const auto& [key, value] : subscriber->sent) Offer(*subscriber, key, 0, epoch);
    }
  }
  for (size_t i = 0; i < batch.delete_count(); ++i) {
    const std::string_view key = batch.delete_key(i);
    if (Hidden(key)) continue;
    ForEachMatch(key, [&](Subscriber& subscriber) { Offer(subscriber, key, 0, epoch); });
  }
  for (size_t i = 0; i < batch.put_count(); ++i) {
    const std::string_view key = batch.put_key(i);
    if (Hidden(key)) continue;
    const int64_t value = batch.put_record(i).value;
    ForEachMatch(key, [&](Subscriber& subscriber) { Offer(subscriber, key, value, epoch); });
  }
  DropOverflowed();
  RaiseTo(feed_->durable_epoch, epoch);
}

void SubscriptionHub::Flush() {
  // One subscriber at a time under the lock: the committing thread (OnCommit) waits for at
  // most one subscriber's updates, however many subscribers there are.
  std::vector<SubscriberId> due;
  std::vector<Retired> garbage;  // freed last, after the lock
  {
    std::lock_guard lock(mutex_);
    due.swap(dirty_);
    garbage.swap(garbage_);
  }
  for (const SubscriberId id : due) {
    std::shared_ptr<SubscriberSink> sink;
    std::optional<SubscriptionDelivery> delivery;
    std::string dropped;
    Retired retired;  // freed after the lock
    {
      std::lock_guard lock(mutex_);
      Subscriber* subscriber = Find(id);
      if (subscriber == nullptr) continue;  // removed since it was marked
      subscriber->dirty = false;
      if (subscriber->dropped.empty()) {
        delivery = TakeDue(*subscriber);  // may drop it
      }
      if (!subscriber->dropped.empty()) {
        sink = std::move(subscriber->sink);
        dropped = std::move(subscriber->dropped);
        retired = Erase(*subscriber);
      } else if (delivery) {
        sink = subscriber->sink;
      }
    }
    if (!dropped.empty()) {
      sink->Disconnect(std::move(dropped));
    } else if (delivery) {
      if (options_.shower) options_.shower->Show(delivery->updates());
      sink->Deliver(std::move(*delivery));
    }
  }
}

std::optional<SubscriptionDelivery> SubscriptionHub::TakeDue(Subscriber& subscriber) {
  if (subscriber.priming > 0 || subscriber.in_flight->load(std::memory_order_acquire)) {
    MarkDirty(subscriber);  // the next tick, with whatever coalesced meanwhile
    return std::nullopt;
  }
  const uint64_t durable = feed_->durable_epoch.load(std::memory_order_acquire);
  std::vector<SubscriptionUpdate> updates;
  for (auto it = subscriber.pending.begin(); it != subscriber.pending.end();) {
    Pending& pending = it->second;
    if (pending.epoch > durable) {
      ++it;  // read by Subscribe from an epoch not durable yet
      continue;
    }
    const auto sent = subscriber.sent.find(it->first);
    const int64_t last = sent == subscriber.sent.end() ? 0 : sent->second;
    // A key shown as more than its integer may have changed with its integer unchanged.
    if (pending.value != last || ShowsMore(it->first)) {
      updates.push_back(SubscriptionUpdate{it->first, pending.value, std::nullopt, std::nullopt});
      if (pending.value == 0) {
        if (sent != subscriber.sent.end()) subscriber.sent.erase(sent);
      } else if (sent != subscriber.sent.end()) {
        sent->second = pending.value;
      } else {
        subscriber.sent.emplace(it->first, pending.value);
      }
    } else if (pending.asked) {
      // Unchanged: only the subscriptions that asked for it want it again.
      updates.push_back(
          SubscriptionUpdate{it->first, pending.value, std::move(pending.asked), std::nullopt});
    }
    it = subscriber.pending.erase(it);
    --pending_keys_;
  }
  if (subscriber.sent.size() > options_.max_pending) {
    Drop(subscriber, fmt::format("following more than {} counters that have a value "
                                 "(subscriber-max-pending): follow fewer counters",
                                 options_.max_pending));
    return std::nullopt;
  }
  if (!subscriber.pending.empty()) MarkDirty(subscriber);
  if (updates.empty()) return std::nullopt;
  updates_sent_ += updates.size();
  subscriber.in_flight->store(true, std::memory_order_release);
  return SubscriptionDelivery(std::move(updates), subscriber.in_flight);
}

SubscriptionHub::Retired SubscriptionHub::Erase(Subscriber& subscriber) {
  Retired retired = UnindexAll(subscriber);
  std::erase(overflowed_, &subscriber);
  auto node = subscribers_.extract(subscriber.id);
  retired.subscriber = std::move(node.mapped());
  feed_->subscribers.fetch_sub(1, std::memory_order_relaxed);
  return retired;
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
