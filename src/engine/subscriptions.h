// SubscriptionHub: live subscriptions to counters. A subscriber follows exact keys and key
// prefixes (families); it gets each followed counter's current value first, then every
// new value, coalesced to at most one per counter per interval.
//
// The feed is the committer (Attach): every durable CommitBatch, on the committing thread.
// So a subscriber only ever sees durable values — none that a crash could take back. A
// deleted or expired counter's new value is 0 (a missing counter is 0); FLUSHALL sends 0
// for every followed key whose last value sent was not 0.
//
// Matching. Exact keys are one hash-map lookup per changed key. Prefixes live in a hash
// map too, beside the set of their distinct lengths: a changed key is looked up once per
// distinct subscribed prefix length (its first L bytes for each such L), never by walking
// the subscriptions. Nobody subscribed costs an atomic load and an atomic maximum (the
// durable epoch) per commit, no lock.
//
// Per subscriber. The observer writes each matched key's latest value into the
// subscriber's pending map (coalescing: the newest value replaces an older one). The
// hub's flusher thread, once per interval, hands each subscriber's due updates to its
// SubscriberSink, which passes them to the subscriber's own I/O thread; a writer never
// waits for a subscriber. A subscriber whose previous hand-off has not been taken yet by
// its thread keeps coalescing.
//
// Limits, so that a subscriber's memory is bounded: at most `max_subscriptions` keys and
// prefixes (a Subscribe past it is refused, nothing changed); past `max_pending` keys
// pending, or past `max_pending` followed keys whose last value sent is not 0 (what FLUSHALL
// must reach), the subscriber is dropped (its sink is told why, once); its connection
// enforces `max_queued_bytes` on what it could not write yet.
//
// The lock. mutex_ is taken by the committing thread (OnCommit), so every commit waits for
// whoever holds it: under it, work is in proportion to what changes (the keys of a commit,
// the subscriptions added or removed, one subscriber's due updates), never to everything a
// subscriber holds. Maps a subscriber lets go of are moved out under the lock and freed
// after it.
//
// Current value first, without races. Subscribe() registers the subscription, then reads
// the current values, each tagged with the commit epoch it may depend on, and merges them
// into the pending map, where an entry is only ever replaced by a value of the same or a
// newer epoch: an update the read already includes cannot overwrite the newer value read,
// and an update after the read does. Nothing is sent for the subscriber in between, and a
// value read is sent only once its epoch is durable. A prefix's current values are its
// first `snapshot_max_keys` keys found by a keyspace scan (any order) that visits at most
// `snapshot_max_scan` entries per Subscribe(); more keys of the family arrive as they change.
//
// Values beyond an integer. A derived counter's group may show more than its key's integer
// (min, max, avg, ...): a ValueShower names such keys, which are then sent whenever written,
// and fills in their values on the flusher thread.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/periodic_thread.h"
#include "core/status.h"
#include "engine/commit_batch.h"
#include "engine/committer.h"
#include "engine/databases.h"
#include "engine/keyspace.h"

namespace tally::engine {

struct SubscriptionUpdate;

// Shows the counters whose value is more than the integer their key holds: a derived
// counter's min, max, avg, count(DISTINCT), numeric sum or several aggregates, whose key
// holds its rows (or distinct values, or units) while the rest lies in hidden records. Set
// by the node (SubscriptionOptions::shower); its layer keeps those values.
class ValueShower {
 public:
  virtual ~ValueShower() = default;
  // True for a key whose value shows more than its integer: its updates are sent whenever
  // the key is written, its integer unchanged or not (another part of its value may have
  // changed). Called under the hub's lock: quick, taking no lock that is not a leaf.
  virtual bool ShowsMore(std::string_view key) const = 0;
  // Sets `shown` of each update whose key ShowsMore to the key's value now, and returns
  // once that value is durable (so that, like every value sent, it is one a crash cannot
  // take back). Called on the hub's flusher thread, outside the hub's lock, before the
  // updates go to the subscriber's sink.
  virtual void Show(std::span<SubscriptionUpdate> updates) = 0;
};

struct SubscriptionOptions {
  // tallyd --subscription-interval-ms: a subscriber gets at most one value per counter per
  // interval. Default 100 ms.
  int interval_ms = 100;
  // tallyd --subscriber-max-pending: a subscriber with more keys than this waiting to be
  // sent (it, or its connection's thread, does not keep up), or following more keys than
  // this whose last value sent is not 0, is disconnected. Default 10000.
  size_t max_pending = 10000;
  // tallyd --subscriber-max-subscriptions: keys plus prefixes one subscriber may follow; a
  // Subscribe() that would pass it is refused. Default 10000.
  size_t max_subscriptions = 10000;
  // tallyd --subscriber-max-queued-bytes: a subscriber's connection holding more than this
  // many bytes of updates its client has not read is disconnected. Enforced by the
  // servers' connections, which read it here. Default 8 MiB.
  size_t max_queued_bytes = size_t{8} << 20;
  // How many current values a prefix subscription sends first, at most.
  size_t snapshot_max_keys = 1000;
  // How many keyspace entries one Subscribe() call's scan for its prefixes' current values
  // visits at most (the scan runs on the caller's thread). Keys not reached arrive when
  // they change.
  size_t snapshot_max_scan = 100'000;
  // tallyd --http-allow-origin: the web origins ("https://example.com", or "*" for any)
  // whose pages may open a WebSocket subscription besides the server's own. Read by the
  // HTTP server's subscription route.
  std::vector<std::string> allowed_origins;
  // Keys never delivered, whatever matches them (tally's internal records). Null = none.
  std::function<bool(std::string_view key)> hidden;
  // The values of keys that are more than their integer. Null = every value is its integer.
  std::shared_ptr<ValueShower> shower;
};

// The subscriptions of one subscriber that asked for a key's current value (Subscribe).
struct AskedBy {
  bool key = false;                   // following the key exactly
  std::vector<std::string> prefixes;  // these prefixes of the key
};

// A counter's value when it is more than its integer (ValueShower), spelled for each
// protocol.
struct ShownValue {
  std::string text;  // a Redis message's payload: "12.75", "NULL", a JSON object of several
  std::string json;  // an HTTP event's "value": 12, "12.75", null, an object of several
};

// One new value of one counter.
struct SubscriptionUpdate {
  std::string key;
  int64_t value = 0;  // what the key holds
  // Empty: a new value, for every subscription of the subscriber that follows the key. Set:
  // a current value the subscriber was sent already, sent again only because these
  // subscriptions (just made) asked for it; a connection that tells its subscriptions apart
  // shows it only for them.
  std::optional<AskedBy> only_for;
  // Set by the ValueShower for a key that shows more than `value`: sent instead of it.
  std::optional<ShownValue> shown;
};

// A batch of updates handed to a subscriber's thread. While one is alive (not yet taken),
// the hub hands that subscriber no other: its destruction tells the hub the thread took it.
class SubscriptionDelivery {
 public:
  SubscriptionDelivery(std::vector<SubscriptionUpdate> updates,
                       std::shared_ptr<std::atomic<bool>> in_flight)
      : updates_(std::move(updates)), in_flight_(std::move(in_flight)) {}
  SubscriptionDelivery(SubscriptionDelivery&&) = default;
  SubscriptionDelivery& operator=(SubscriptionDelivery&&) = default;
  ~SubscriptionDelivery() {
    if (in_flight_) in_flight_->store(false, std::memory_order_release);
  }

  const std::vector<SubscriptionUpdate>& updates() const { return updates_; }
  std::vector<SubscriptionUpdate>& updates() { return updates_; }

 private:
  std::vector<SubscriptionUpdate> updates_;
  std::shared_ptr<std::atomic<bool>> in_flight_;
};

// Where a subscriber's updates go: implemented by a server connection. Called on the hub's
// flusher thread; each method must only hand off to the connection's own thread, never
// block, and never call back into the hub.
class SubscriberSink {
 public:
  virtual ~SubscriberSink() = default;
  virtual void Deliver(SubscriptionDelivery delivery) = 0;
  // The hub dropped the subscriber (`reason` says why, for the client): no more updates
  // come; the connection should tell its client and close.
  virtual void Disconnect(std::string reason) = 0;
};

// Figures for INFO and metrics.
struct SubscriptionStats {
  size_t subscribers = 0;                // registered now
  size_t subscriptions = 0;              // exact keys plus prefixes, over every subscriber
  size_t pending_keys = 0;               // updates waiting to be handed to subscribers
  uint64_t updates_sent = 0;             // handed to subscribers' threads, since start
  uint64_t disconnects = 0;              // subscribers dropped for max_pending, since start
  uint64_t queue_limit_disconnects = 0;  // closed by their connection for max_queued_bytes
};

using SubscriberId = uint64_t;

class SubscriptionHub {
 public:
  // `keyspace` (read for current values) must outlive the hub.
  SubscriptionHub(Keyspace* keyspace, SubscriptionOptions options);
  ~SubscriptionHub();  // Stops (see Stop()).
  SubscriptionHub(const SubscriptionHub&) = delete;
  SubscriptionHub& operator=(const SubscriptionHub&) = delete;

  // Feeds the hub from `committer`'s durable batches. REQUIRES: the committer started (its
  // durable epoch is the hub's starting point), and it outlives the hub or is stopped first.
  void Attach(Committer& committer);

  // Starts the flusher thread (one Flush() per interval). Stop() joins it; stop the hub
  // before the servers whose sinks it calls.
  void Start() { flusher_.Start(); }
  void Stop() { flusher_.Stop(); }

  const SubscriptionOptions& options() const { return options_; }

  // Registers a subscriber with no subscriptions yet. The hub keeps `sink` until
  // RemoveSubscriber(), or until it dropped the subscriber and told the sink.
  SubscriberId AddSubscriber(std::shared_ptr<SubscriberSink> sink);
  // Forgets the subscriber and everything pending for it. An unknown id is a no-op.
  void RemoveSubscriber(SubscriberId id);

  // Follows `keys` exactly and every key starting with one of `prefixes` (the empty prefix
  // follows every counter), and queues their current values (a missing key's is 0; a
  // prefix's are its existing keys, up to snapshot_max_keys). Already followed ones are
  // followed once, and their current value is sent again. Fails with kInvalidArgument,
  // changing nothing, when the subscriber would follow more than max_subscriptions keys
  // and prefixes; with kUnavailable when it was dropped (the error says why) or is unknown.
  Status Subscribe(SubscriberId id, std::span<const std::string> keys,
                   std::span<const std::string> prefixes);
  // Stops following the given keys and prefixes (not followed ones are ignored).
  void Unsubscribe(SubscriberId id, std::span<const std::string> keys,
                   std::span<const std::string> prefixes);
  // Stops following everything; the subscriber stays registered.
  void UnsubscribeAll(SubscriberId id);

  // The commit observer (Attach registers it): merges `batch` into the pending maps.
  void OnCommit(const CommitBatch& batch);
  // Sets the epoch up to which values are durable, when no batch says so (tests; Attach).
  void SetDurableEpoch(uint64_t epoch);

  // Hands every subscriber's due updates to its sink, and tells dropped subscribers' sinks.
  // The flusher thread calls it once per interval; tests call it directly.
  void Flush();

  // A connection closed its subscriber for max_queued_bytes (counted for stats()).
  void CountQueueLimitDisconnect() {
    queue_limit_disconnects_.fetch_add(1, std::memory_order_relaxed);
  }

  size_t subscriber_count() const { return feed_->subscribers.load(std::memory_order_relaxed); }
  SubscriptionStats stats() const;

 private:
  // Key prefixes, matched against a key with one hash lookup per distinct prefix length.
  class PrefixSet {
   public:
    bool Insert(const std::string& prefix);  // false when present already
    bool Erase(std::string_view prefix);     // false when absent
    bool contains(std::string_view prefix) const;
    // Calls `visit(prefix)` for each prefix that `key` starts with, within the key's own
    // database (ShortestPrefixFor, engine/databases.h).
    template <typename Visit>
    void ForEachMatch(std::string_view key, Visit&& visit) const;
    bool Matches(std::string_view key) const;
    size_t size() const { return prefixes_.size(); }
    auto begin() const { return prefixes_.begin(); }
    auto end() const { return prefixes_.end(); }

   private:
    absl::flat_hash_set<std::string> prefixes_;
    std::map<size_t, size_t> lengths_;  // a prefix length -> how many prefixes have it
  };

  struct Pending {
    int64_t value = 0;
    uint64_t epoch = 0;  // the commit epoch the value may depend on
    // Set: a current value asked for by these subscriptions, sent even when unchanged.
    std::optional<AskedBy> asked;
  };
  // Ordered, so that the entries under a prefix are one range (what Unsubscribe prunes).
  using PendingMap = std::map<std::string, Pending, std::less<>>;
  // The last value sent per key, for keys whose last value was not 0.
  using SentMap = std::map<std::string, int64_t, std::less<>>;

  struct Subscriber {
    SubscriberId id = 0;
    std::shared_ptr<SubscriberSink> sink;
    absl::flat_hash_set<std::string> keys;
    PrefixSet prefixes;
    PendingMap pending;
    // What FLUSHALL zeroes, and what makes an unchanged value not sent twice.
    SentMap sent;
    std::shared_ptr<std::atomic<bool>> in_flight = std::make_shared<std::atomic<bool>>(false);
    int priming = 0;      // Subscribe() calls reading current values: nothing is sent
    bool dirty = false;   // listed in dirty_
    std::string dropped;  // non-empty: dropped for this reason; the sink is told next Flush
  };
  // What a subscriber let go of, moved out under mutex_ to be freed after it.
  struct Retired {
    absl::flat_hash_set<std::string> keys;
    PrefixSet prefixes;
    PendingMap pending;
    SentMap sent;
    std::unique_ptr<Subscriber> subscriber;  // set when the subscriber itself went
  };
  // A current value read by Subscribe().
  struct Snapshot {
    std::string key;
    int64_t value;
    uint64_t epoch;
    AskedBy asked;
  };

  // All below REQUIRE mutex_ held.
  Subscriber* Find(SubscriberId id);
  // Stores a value for `key` unless a newer one is pending; lists the subscriber for
  // DropOverflowed() when its pending map outgrows max_pending. `asked`: a current value.
  void Offer(Subscriber& subscriber, std::string_view key, int64_t value, uint64_t epoch,
             const AskedBy* asked = nullptr);
  void MarkDirty(Subscriber& subscriber);
  // Drops the subscribers whose pending map outgrew max_pending (Offer lists them).
  void DropOverflowed();
  // Marks the subscriber dropped for `reason`; what it held goes to garbage_.
  void Drop(Subscriber& subscriber, std::string reason);
  // Ends every subscription of the subscriber and moves out what it holds.
  Retired UnindexAll(Subscriber& subscriber);
  // Forgets the subscriber entirely: what it held, and the subscriber itself, is returned.
  Retired Erase(Subscriber& subscriber);
  // The subscriber's pending values that are durable, as a delivery (marking it in flight);
  // nothing when it waits (priming, a delivery in flight) or has nothing due. Drops the
  // subscriber when it follows more than max_pending keys with a value.
  std::optional<SubscriptionDelivery> TakeDue(Subscriber& subscriber);
  // Calls `visit` for each subscriber following `key` (once per matching subscription).
  template <typename Visit>
  void ForEachMatch(std::string_view key, Visit&& visit);
  static bool Follows(const Subscriber& subscriber, std::string_view key);
  void Unindex(Subscriber& subscriber, std::string_view key, bool prefix);
  // Forgets the pending and sent values of `key`, or of the keys under `prefix`, that the
  // subscriber no longer follows.
  void Prune(Subscriber& subscriber, std::string_view key);
  void PruneRange(Subscriber& subscriber, std::string_view prefix);

  // Without mutex_: the current values of the keys and prefixes, as Snapshot entries.
  std::vector<Snapshot> ReadCurrent(std::span<const std::string> keys,
                                    std::span<const std::string> prefixes);
  // tally's internal records, never delivered.
  bool Hidden(std::string_view key) const { return options_.hidden && options_.hidden(key); }
  bool ShowsMore(std::string_view key) const {
    return options_.shower && options_.shower->ShowsMore(key);
  }

  Keyspace* const keyspace_;
  const SubscriptionOptions options_;
  std::atomic<uint64_t> queue_limit_disconnects_{0};

  mutable std::mutex mutex_;
  SubscriberId next_id_ = 1;  // guarded by mutex_
  // guarded by mutex_:
  absl::flat_hash_map<SubscriberId, std::unique_ptr<Subscriber>> subscribers_;
  absl::flat_hash_map<std::string, std::vector<Subscriber*>> exact_;
  absl::flat_hash_map<std::string, std::vector<Subscriber*>> prefixes_;
  std::map<size_t, size_t> prefix_lengths_;  // a subscribed prefix length -> its prefixes
  // Subscribers with something for Flush(), by id: one that went meanwhile is skipped.
  std::vector<SubscriberId> dirty_;
  std::vector<Subscriber*> overflowed_;  // past max_pending, to be dropped
  std::vector<Retired> garbage_;         // what dropped subscribers held; Flush() frees it
  size_t subscriptions_ = 0;
  size_t pending_keys_ = 0;
  uint64_t updates_sent_ = 0;
  uint64_t disconnects_ = 0;

  // The committer's observer reaches the hub through this, which the destructor empties:
  // the committer may outlive the hub. The atomics are read by the observer before it
  // locks anything.
  struct Feed {
    std::mutex mutex;
    SubscriptionHub* hub = nullptr;  // guarded by mutex
    std::atomic<size_t> subscribers{0};
    // Values of epochs up to this one are durable. Raised by the committing thread (under
    // mutex_ when anyone subscribes), read under mutex_.
    std::atomic<uint64_t> durable_epoch{0};
  };
  const std::shared_ptr<Feed> feed_ = std::make_shared<Feed>();

  PeriodicThread flusher_;  // last: stopped and destroyed before what Flush() uses
};

}  // namespace tally::engine
