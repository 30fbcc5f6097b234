// ChangeFeed's trimming of the change stream and the catalog snapshots it needs (change_feed.h
// says when and how far): the owner of partition 0 publishes its catalog and trims; a node
// whose catalog position is gone from the stream starts from the newest catalog snapshot.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <set>

#include "cluster/change_feed.h"
#include "core/integer.h"

namespace tally::cluster {

Result<bool> ChangeFeed::RestoreCatalog(NatsConnection& connection,
                                        const ChangeFeedOptions& options,
                                        ClusterPersistence& persistence) {
  auto state = connection.GetStreamState(options.stream);
  if (!state) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("reading the state of {}: {}", options.stream,
                                 state.error().ToError().message));
  }
  auto records = persistence.ReadCatalog();
  if (!records) return tl::unexpected(records.error());
  uint64_t ddl = 0;
  for (const auto& [name, value] : *records) {
    if (name == kDdlRecord) ddl = ParseUint64(value).value_or(0);
  }
  if (state->first_seq <= ddl + 1 || state->last_seq < ddl + 1) return false;
  SnapshotStore* store = options.snapshots;
  auto latest = store != nullptr ? store->LatestCatalog()
                                 : Result<std::optional<CatalogSnapshot>>(std::nullopt);
  if (!latest) return tl::unexpected(latest.error());
  if (!*latest || (*latest)->seq + 1 < state->first_seq) {
    return Corruption(fmt::format(
        "{} begins at {}, past this node's catalog position {}, and no catalog snapshot covers "
        "the messages in between",
        options.stream, state->first_seq, ddl));
  }
  const CatalogSnapshot& snapshot = **latest;
  std::vector<engine::Persistence::CatalogOp> ops;
  std::set<std::string_view> kept;
  for (const auto& [name, value] : snapshot.records) kept.insert(name);
  for (const auto& record : *records) {
    if (!kept.contains(record.first)) ops.push_back({record.first, std::nullopt});
  }
  for (const auto& [name, value] : snapshot.records) ops.push_back({name, value});
  if (auto status = persistence.WriteCatalog(ops); !status) {
    return tl::unexpected(status.error());
  }
  spdlog::info(
      "change feed: {} begins at {}, past this node's catalog position {}: the catalog was "
      "restored from the snapshot at {} ({} records)",
      options.stream, state->first_seq, ddl, snapshot.seq, snapshot.records.size());
  return true;
}

uint64_t ChangeFeed::ComputeReadFloor() {
  std::vector<uint32_t> every(options_.partition_count);
  std::iota(every.begin(), every.end(), 0u);
  return ReadFrom(every, ddl_seq() + 1);
}

void ChangeFeed::SkipTrimmed(uint64_t seq) {
  const uint64_t expected = next_seq();
  if (ddl_seq() + 1 < seq) {
    // Its catalog would miss definitions: only the catalog snapshot can bring it on, and the
    // derived counters load from the catalog at start only.
    spdlog::critical(
        "change feed: {} was trimmed past this node's catalog position {} (it was silent "
        "while the stream was trimmed): tallyd exits; started again, it restores the catalog "
        "from the newest catalog snapshot",
        options_.stream, ddl_seq());
    std::fflush(nullptr);
    std::_Exit(75);
  }
  // Re-read for a partition gained whose position lies below the trim (trimming keeps what
  // every node heard from lately reads from: not seen unless a node was silent for long).
  spdlog::error(
      "change feed: {} no longer holds messages {} to {} that a partition of this node was "
      "to read again: skipped",
      options_.stream, expected, seq - 1);
  std::lock_guard lock(mutex_);
  next_seq_ = seq;
}

void ChangeFeed::SetTrimFloor(std::function<uint64_t()> floor) {
  std::lock_guard lock(mutex_);
  trim_floor_ = std::move(floor);
}

uint64_t ChangeFeed::FirstKept(uint64_t first, uint64_t below) {
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const int64_t keep_from_ns = now_ns - options_.keep_ms * 1'000'000;
  // The stream's times grow with its sequences: the first message younger than the window,
  // by halving [first, below). A message that cannot be read counts as young.
  uint64_t low = first;
  uint64_t high = below;
  while (low < high) {
    const uint64_t middle = low + (high - low) / 2;
    auto message = connection_.GetMessage(options_.stream, middle);
    const bool old =
        message && *message && (*message)->time_ns != 0 && (*message)->time_ns < keep_from_ns;
    if (old) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

void ChangeFeed::MaybeTrim() {
  if (options_.trim_every == 0 || options_.snapshots == nullptr) return;
  const std::vector<uint32_t> owned = persistence_.Owned();
  if (!std::binary_search(owned.begin(), owned.end(), 0u)) return;
  std::function<uint64_t()> others;
  {
    std::lock_guard lock(mutex_);
    others = trim_floor_;
  }
  if (!others) return;
  // Never past what any node would read, this one included.
  uint64_t floor = std::min(others(), ComputeReadFloor());
  auto state = connection_.GetStreamState(options_.stream);
  if (!state || floor < state->first_seq + options_.trim_every) return;
  // A counter in the middle of its backfill keeps the records of a step in progress: its
  // catalog is taken once it is done.
  for (const derived::CounterListing& counter : derived_.Counters()) {
    if (counter.state == derived::CounterState::kBackfilling) return;
  }
  floor = FirstKept(state->first_seq, floor);
  if (floor < state->first_seq + options_.trim_every) return;

  // The catalog as it stands at this node's catalog position, recorded first.
  FinishCatalogMessage(std::max(ddl_seq(), next_seq() - 1));
  const uint64_t catalog_seq = ddl_seq();
  floor = std::min(floor, catalog_seq + 1);
  // A newer one (a previous owner of partition 0 read further) covers this trim as well:
  // it stays the newest, and this node's catalog need not be read.
  auto latest = options_.snapshots->LatestCatalog();
  const bool covered = latest && *latest && (*latest)->seq >= catalog_seq;
  if (!covered) {
    CatalogSnapshot snapshot;
    snapshot.seq = catalog_seq;
    auto records = persistence_.ReadCatalog();
    if (!records) {
      spdlog::warn("change feed: cannot read the catalog to snapshot it: {}",
                   records.error().message);
      return;
    }
    snapshot.records = std::move(*records);
    if (auto written = options_.snapshots->WriteCatalog(snapshot); !written) {
      spdlog::warn("change feed: cannot publish the catalog snapshot at {}: {}", snapshot.seq,
                   written.error().message);
      return;
    }
  }
  if (auto purged = connection_.PurgeStream(options_.stream, floor); !purged) {
    spdlog::warn("change feed: cannot trim {} below {}: {}", options_.stream, floor,
                 purged.error().ToError().message);
    return;
  }
  spdlog::info("change feed: {} trimmed below {} (was from {}; catalog snapshot at {})",
               options_.stream, floor, state->first_seq, covered ? (*latest)->seq : catalog_seq);
  std::lock_guard lock(mutex_);
  ++trims_;
  trimmed_below_ = floor;
}

ChangeStreamStats ChangeFeed::Stats() {
  ChangeStreamStats stats;
  stats.floor = ReadFloor();  // never the keyspace's locks on the coordinator's thread
  std::lock_guard lock(mutex_);
  stats.read = next_seq_ - 1;
  stats.catalog = ddl_seq_;
  stats.trims = trims_;
  stats.trimmed_below = trimmed_below_;
  return stats;
}

}  // namespace tally::cluster
