#include "cluster/change_feed.h"

#include <fmt/format.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "cluster/routing.h"
#include "core/integer.h"
#include "core/slot.h"
#include "core/thread_name.h"
#include "engine/definitions/parser.h"
#include "engine/derived/derived_keyspace.h"

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kScriptsKept = 512;
constexpr auto kRecordEvery = std::chrono::seconds(2);      // how often Run records its progress
constexpr auto kTrimCheckEvery = std::chrono::seconds(10);  // how often Run looks at trimming

std::string Hex(std::string_view bytes) {
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const unsigned char c : bytes) fmt::format_to(std::back_inserter(hex), "{:02x}", c);
  return hex;
}

}  // namespace

std::string ChangeFeed::RandomId(std::string_view kind) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // Without OpenSSL's generator the clock and address still differ between calls.
    const auto now = Clock::now().time_since_epoch().count();
    std::memcpy(bytes, &now, sizeof now);
  }
  return fmt::format("{}:{}", kind,
                     Hex(std::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes)));
}

ChangeFeed::ChangeFeed(NatsConnection& connection, ChangeFeedOptions options,
                       ClusterPersistence& persistence, engine::Engine& engine,
                       derived::DerivedCounters& derived)
    : connection_(connection),
      options_(std::move(options)),
      persistence_(persistence),
      engine_(engine),
      derived_(derived) {
  for (uint32_t p = 0; p < options_.partition_count; ++p) {
    position_names_.push_back(ChangePositionName(p, options_.partition_count));
    fence_names_.push_back(SourceFenceName(p, options_.partition_count));
  }
}

ChangeFeed::~ChangeFeed() { Stop(); }

Status ChangeFeed::Start() {
  auto records = persistence_.ReadCatalog();
  if (!records) return tl::unexpected(records.error());
  for (const auto& [name, value] : *records) {
    if (!name.starts_with(kClusterRecordPrefix)) continue;
    const std::optional<int64_t> number = ParseInt64(value);
    if (!number || *number < 0)
      return Corruption(fmt::format("catalog record {}: '{}'", name, value));
    std::lock_guard lock(mutex_);
    if (name == kDdlRecord) {
      ddl_seq_ = static_cast<uint64_t>(*number);
      next_seq_ = ddl_seq_ + 1;
    } else if (name == kSourceClaimRecord) {
      source_claim_ = *number;
    } else if (name == kSourcedRecord) {
      sourced_ = *number != 0;
    } else if (name.starts_with(kSourcePositionRecord)) {
      source_positions_[name.substr(kSourcePositionRecord.size())] = *number;
    } else if (name.starts_with(kHoldRecord)) {
      RestoreHold(std::string_view(name).substr(kHoldRecord.size()), *number);
    }
  }
  if (sourced()) derived_.MarkEverySourceStreamed();
  thread_ = NamedThread("change feed", [this] { Run(); });
  return OkStatus();
}

void ChangeFeed::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  advanced_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t ChangeFeed::next_seq() const {
  std::lock_guard lock(mutex_);
  return next_seq_;
}

uint64_t ChangeFeed::ddl_seq() const {
  std::lock_guard lock(mutex_);
  return ddl_seq_;
}

int64_t ChangeFeed::AppliedPosition(uint32_t partition) {
  const std::string stored = derived::PositionKey(position_names_[partition]);
  const engine::HashedKey key(stored);  // a view of `stored`
  engine::View view = engine_.keyspace().Lock(key);
  return view.Get(key).value_or(0);
}

uint64_t ChangeFeed::ReadFrom(std::span<const uint32_t> partitions, uint64_t from) {
  for (const uint32_t p : partitions) {
    // From the message at the partition's position itself: a consumer's batch is applied
    // segment by segment, and its previous owner may have stopped within one (the segments
    // it applied are behind the partition's fence; any other message there is done).
    from = std::min(from, std::max<uint64_t>(static_cast<uint64_t>(AppliedPosition(p)), 1));
  }
  return from;
}

void ChangeFeed::Run() {
  auto next_record = Clock::now() + kRecordEvery;
  auto next_trim_check = Clock::now() + kTrimCheckEvery;
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    // Every catalog message up to what the feed read has run (it reads in order): recorded
    // now and then, also while the stream is idle, so that a restart reads again from there
    // rather than from the last catalog message, and trimming may pass it.
    if (Clock::now() >= next_record) {
      next_record = Clock::now() + kRecordEvery;
      if (const uint64_t read = next_seq() - 1; read > ddl_seq()) FinishCatalogMessage(read);
      read_floor_.store(ComputeReadFloor(), std::memory_order_relaxed);
    }
    if (Clock::now() >= next_trim_check) {
      next_trim_check = Clock::now() + kTrimCheckEvery;
      MaybeTrim();
    }
    // A partition gained (a claim, a hand-over) may be behind what the feed has read: read
    // again from its position.
    std::vector<uint32_t> owned = persistence_.Owned();
    if (owned != owned_) {
      const uint64_t from = ReadFrom(owned, next_seq());
      owned_ = std::move(owned);
      std::lock_guard lock(mutex_);
      if (from < next_seq_) {
        next_seq_ = from;
        consumer_.reset();
      }
    }
    if (!consumer_) {
      auto started =
          OrderedConsumer::Start(connection_, options_.stream, options_.subject, next_seq());
      if (!started) {
        spdlog::debug("change feed: cannot read {} yet: {}", options_.stream,
                      started.error().message);
        std::unique_lock lock(mutex_);
        advanced_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; });
        continue;
      }
      consumer_ = std::move(*started);
    }
    auto message = consumer_->Next(100);
    if (!message) {
      consumer_.reset();
      continue;
    }
    if (!message->has_value()) continue;
    const StoredMessage& stored = **message;
    if (stored.seq < next_seq()) continue;
    if (stored.seq > next_seq()) SkipTrimmed(stored.seq);
    Handle(stored.seq, stored.data);
    {
      std::lock_guard lock(mutex_);
      next_seq_ = stored.seq + 1;
    }
    advanced_.notify_all();
  }
}

void ChangeFeed::Handle(uint64_t seq, std::string_view data) {
  const size_t end = data.find('\n');
  if (!data.starts_with(kMagic) || end == std::string_view::npos) {
    spdlog::warn("change feed: message {} of {} is not tally's: skipped", seq, options_.stream);
    return;
  }
  const std::string_view head = data.substr(kMagic.size(), end - kMagic.size());
  const std::string_view rest = data.substr(end + 1);
  if (head == "ddl") {
    RunScript(seq, rest);
  } else if (head.starts_with("push ")) {
    ApplyPush(seq, head.substr(5), rest);
  } else if (head.starts_with("hold ")) {
    RunHold(seq, head.substr(5));
  } else if (head == "release") {
    RunRelease(seq);
  } else if (head.starts_with("repair ")) {
    ApplyRepair(seq, head.substr(7), rest);
  } else {
    HandleSource(seq, head, rest);
  }
}

void ChangeFeed::RunScript(uint64_t seq, std::string_view script) {
  if (seq <= ddl_seq()) return;  // run before (the feed reads again for a partition gained)
  auto outcome = derived_.ExecuteAt(script, static_cast<int64_t>(seq));
  if (!outcome) {
    spdlog::warn("change feed: the script at {} failed on this node (as on every node): {}", seq,
                 outcome.error().message);
  }
  {
    // Before the script counts as run: Define looks its outcome up then.
    std::lock_guard lock(mutex_);
    scripts_.insert_or_assign(seq, std::move(outcome));
    while (scripts_.size() > kScriptsKept) scripts_.erase(scripts_.begin());
  }
  FinishCatalogMessage(seq);
}

void ChangeFeed::WithShares(
    const std::function<void(std::span<const derived::PartitionShare>)>& apply) {
  // The partitions owned now, held so until the message is in the keyspace: none is handed
  // over or forgotten meanwhile (a share written after would never reach its stream). Of
  // those, only the ones the feed reads for (owned_): one gained since is read again from
  // its own position first (Run), or the messages before this one would be skipped for it.
  std::shared_lock<std::shared_mutex> ownership = persistence_.HoldOwnership();
  std::vector<derived::PartitionShare> shares;
  for (const uint32_t p : persistence_.Owned()) {
    if (std::binary_search(owned_.begin(), owned_.end(), p)) {
      shares.push_back({p, position_names_[p], fence_names_[p]});
    }
  }
  if (shares.empty()) return;
  apply(shares);
  ownership.unlock();
  // Nobody waits on this thread for its commit: write it now rather than at the committer's
  // next sweep.
  engine_.committer().TryCommitNow();
}

uint32_t ChangeFeed::PartitionOf(std::string_view key) const {
  return SlotPartition(KeySlot(key), options_.partition_count);
}

void ChangeFeed::ApplyShares(uint64_t seq, std::string_view kind, std::string_view only_counter,
                             std::string_view body, const derived::ShareOrder& order) {
  WithShares([&](std::span<const derived::PartitionShare> shares) {
    std::vector<uint32_t> overflowed;
    auto outcome = derived_.ApplyShares(
        body, only_counter, order, shares,
        [this](std::string_view key) { return PartitionOf(key); }, decoder_, &overflowed);
    if (!outcome) {
      spdlog::error("change feed: the {} at {} was not applied: {}", kind, seq,
                    outcome.error().message);
      return;
    }
    for (const uint32_t p : overflowed) {
      spdlog::warn(
          "change feed: the {} at {} would take a counter of partition {} out of the "
          "int64 range: it counts nothing there",
          kind, seq, p);
    }
  });
}

void ChangeFeed::ApplyPush(uint64_t seq, std::string_view only_counter, std::string_view body) {
  const auto position = static_cast<int64_t>(seq);
  ApplyShares(seq, "push", only_counter, body, {position, position, {}});
}

void ChangeFeed::HoldOff(bool held_off) {
  {
    // Under the mutex, so that a Define waiting on advanced_ cannot miss it.
    std::lock_guard lock(mutex_);
    held_off_.store(held_off, std::memory_order_release);
  }
  advanced_.notify_all();
}

Result<PubAck> ChangeFeed::Publish(std::string data, std::string_view msg_id) {
  if (held_off_.load(std::memory_order_acquire)) {
    return MakeError(ErrorCode::kUnavailable,
                     "a partition of this node changes hands: nothing was put in the cluster's "
                     "change stream; send it again");
  }
  Publication publication;
  publication.subject = options_.subject;
  publication.data = data;
  publication.msg_id = msg_id;
  auto ack = connection_.Publish(publication, options_.publish_timeout_ms);
  if (!ack) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("the cluster's change stream did not take it: {}",
                                 ack.error().ToError().message));
  }
  return *ack;
}

Result<derived::PushOutcome> ChangeFeed::Push(std::string_view body, std::string_view id,
                                              std::string_view only_counter,
                                              derived::ChangeDecoder& decoder) {
  size_t changes = 0;
  auto keys = derived_.PlanPush(body, only_counter, decoder, &changes);
  if (!keys) return tl::unexpected(keys.error());
  const std::string msg_id = id.empty() ? RandomId("push") : "id:" + Hex(id);
  auto ack = Publish(fmt::format("{}push {}\n{}", kMagic, only_counter, body), msg_id);
  if (!ack) return tl::unexpected(ack.error());
  std::set<uint32_t> moved;
  for (const std::string& key : *keys) moved.insert(PartitionOf(key));
  if (auto status = AwaitPartitions(ack->seq, moved, "push"); !status) {
    return tl::unexpected(status.error());
  }
  derived::PushOutcome outcome;
  outcome.changes = changes;
  if (ack->duplicate) {
    outcome.duplicates = changes;
  } else {
    outcome.applied = changes;
    outcome.increments = keys->size();
  }
  return outcome;
}

Status ChangeFeed::AwaitPartitions(uint64_t seq, const std::set<uint32_t>& partitions,
                                   std::string_view what) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.wait_ms);
  for (const uint32_t p : partitions) {
    while (AppliedPosition(p) < static_cast<int64_t>(seq)) {
      if (Clock::now() >= deadline || held_off_.load(std::memory_order_acquire)) {
        return MakeError(ErrorCode::kUnavailable,
                         fmt::format("the {} is in the cluster's change stream (sequence {}) "
                                     "and will be applied, but partition {} has not applied it "
                                     "yet as this node sees it",
                                     what, seq, p));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return OkStatus();
}

Result<std::vector<derived::StatementOutcome>> ChangeFeed::Define(std::string_view script) {
  auto statements = definitions::ParseScript(script);
  if (!statements) return tl::unexpected(statements.error());
  const bool shows_only = std::all_of(statements->begin(), statements->end(), [](const auto& s) {
    return std::holds_alternative<definitions::ShowCounters>(s) ||
           std::holds_alternative<definitions::ShowSources>(s);
  });
  if (shows_only) return derived_.Execute(script);
  auto ack = Publish(fmt::format("{}ddl\n{}", kMagic, script), RandomId("ddl"));
  if (!ack) return tl::unexpected(ack.error());
  std::unique_lock lock(mutex_);
  advanced_.wait_for(lock, std::chrono::milliseconds(options_.wait_ms), [&] {
    return ddl_seq_ >= ack->seq || stopping_ || held_off_.load(std::memory_order_acquire);
  });
  const bool ran = ddl_seq_ >= ack->seq;
  const auto found = scripts_.find(ack->seq);
  if (!ran || found == scripts_.end()) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("the script is in the cluster's change stream (sequence {}) "
                                 "and every node will run it, but this node has not yet",
                                 ack->seq));
  }
  return found->second;
}

}  // namespace tally::cluster
