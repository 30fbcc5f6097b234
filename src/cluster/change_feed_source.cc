// ChangeFeed's part for a PostgreSQL source consumed in the cluster (change_feed.h lists the
// messages): the feed's handling of a consumer's messages, and what the consumer
// (ClusterSourceTarget) calls to publish them and to wait for them.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cluster/change_feed.h"
#include "cluster/source_batch.h"
#include "core/integer.h"

namespace tally::cluster {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void ChangeFeed::HandleSource(uint64_t seq, std::string_view head, std::string_view body) {
  const std::vector<std::string_view> fields = Split(head, ' ');
  const std::string_view kind = fields.front();
  // Every consumer message names its claim first; the kinds' other fields follow.
  size_t wanted = 0;
  if (kind == "rows" || kind == "activate") {
    wanted = 4;
  } else if (kind == "source-reset" || kind == "counter-reset" || kind == "finish") {
    wanted = 3;
  } else if (kind == "batch" || kind == "sourced") {
    wanted = 2;
  } else if (kind == "reached") {
    wanted = 3;
  }
  const std::optional<int64_t> claim = fields.size() > 1 ? ParseInt64(fields[1]) : std::nullopt;
  if (wanted == 0 || fields.size() != wanted || !claim) {
    spdlog::warn("change feed: message {} of {} is of kind '{}': skipped", seq, options_.stream,
                 head.substr(0, 80));
    return;
  }
  if (kind == "batch") {
    ApplyBatch(seq, *claim, body);
    return;
  }
  if (kind == "reached") {
    HandleReached(seq, *claim, fields[2]);
    return;
  }
  // Not ordered by LSN: only the claim is checked.
  const derived::ShareOrder unordered{static_cast<int64_t>(seq), derived::kPendingStart,
                                      derived::SourceFence{*claim, 0, 0}};
  if (kind == "rows") {
    ApplyShares(seq, "backfill chunk", fields[3] == "-" ? std::string_view() : fields[3], body,
                unordered);
    return;
  }
  if (kind == "source-reset" || kind == "counter-reset") {
    const bool whole_source = kind == "source-reset";
    WithShares([&](std::span<const derived::PartitionShare> shares) {
      derived_.ResetShares(whole_source ? fields[2] : std::string_view(),
                           whole_source ? std::string_view() : fields[2], unordered, shares,
                           [this](std::string_view key) { return PartitionOf(key); });
    });
  }
  // The catalog's part, once per node.
  if (!TakeCatalogMessage(seq, *claim)) return;
  Status status = OkStatus();
  if (kind == "source-reset") {
    status = derived_.ResetSourceState(fields[2]);
    std::lock_guard lock(mutex_);
    source_positions_.erase(std::string(fields[2]));
  } else if (kind == "counter-reset") {
    status = derived_.ResetCounterState(fields[2]);
  } else if (kind == "activate") {
    const std::optional<int64_t> lsn = ParseInt64(fields[3]);
    if (!lsn) {
      status = InvalidArgument(fmt::format("bad position '{}'", fields[3]));
    } else if (auto activated = derived_.ActivateCounter(fields[2], *lsn); !activated) {
      status = tl::unexpected(activated.error());
    }
  } else if (kind == "finish") {
    status = derived_.FinishBackfill(fields[2]);
  } else if (kind == "sourced") {
    derived_.MarkEverySourceStreamed();
    std::lock_guard lock(mutex_);
    sourced_ = true;
  }
  if (!status) {
    spdlog::warn("change feed: the source consumer's {} at {} failed on this node: {}", kind, seq,
                 status.error().message);
  }
  FinishCatalogMessage(seq);
}

void ChangeFeed::ApplyBatch(uint64_t seq, int64_t claim, std::string_view body) {
  auto segments = ParseBatch(body);
  if (!segments) {
    spdlog::error("change feed: message {} of {}: {}: skipped", seq, options_.stream,
                  segments.error().message);
    return;
  }
  const auto position = static_cast<int64_t>(seq);
  for (const BatchSegment& segment : *segments) {
    const derived::ShareOrder order{position, segment.lsn,
                                    derived::SourceFence{claim, segment.lsn, segment.part}};
    if (segment.kind == BatchSegment::Kind::kRows) {
      ApplyShares(seq, "source transaction", {}, segment.rows, order);
    } else if (segment.kind == BatchSegment::Kind::kTruncate) {
      WithShares([&](std::span<const derived::PartitionShare> shares) {
        derived_.ResetShares(segment.sources, {}, order, shares,
                             [this](std::string_view key) { return PartitionOf(key); });
      });
    }
    // The positions it moves, from a consumer not replaced yet.
    std::lock_guard lock(mutex_);
    // Whoever sent it: a transaction past a verification hold in the stream while it stands.
    if (hold_.held) hold_.applied = std::max(hold_.applied, segment.lsn);
    if (claim < source_claim_) continue;
    source_claim_ = claim;
    for (const std::string_view source : Split(segment.sources, ',')) {
      int64_t& stored = source_positions_[std::string(source)];
      stored = std::max(stored, segment.lsn);
    }
  }
}

bool ChangeFeed::TakeCatalogMessage(uint64_t seq, int64_t claim) {
  {
    std::lock_guard lock(mutex_);
    if (seq <= ddl_seq_) return false;  // run before (the feed reads again for a partition)
    if (claim >= source_claim_) {
      source_claim_ = claim;
      return true;
    }
  }
  // From a consumer replaced since: nothing to run, but it is behind us.
  FinishCatalogMessage(seq);
  return false;
}

void ChangeFeed::FinishCatalogMessage(uint64_t seq) {
  std::vector<engine::Persistence::CatalogOp> ops;
  {
    std::lock_guard lock(mutex_);
    ddl_seq_ = std::max(ddl_seq_, seq);
    ops.push_back({std::string(kDdlRecord), std::to_string(ddl_seq_)});
    if (source_claim_ != 0) {
      ops.push_back({std::string(kSourceClaimRecord), std::to_string(source_claim_)});
    }
    if (sourced_) ops.push_back({std::string(kSourcedRecord), "1"});
    for (const auto& [source, lsn] : source_positions_) {
      ops.push_back({fmt::format("{}{}", kSourcePositionRecord, source), std::to_string(lsn)});
    }
    const std::pair<std::string_view, int64_t> hold[] = {
        {"position", hold_.held ? hold_.position : 0},
        {"seq", static_cast<int64_t>(hold_.seq)},
        {"reached", static_cast<int64_t>(hold_.reached_seq)},
        {"applied", hold_.applied}};
    for (const auto& [field, value] : hold) {
      ops.push_back({fmt::format("{}{}", kHoldRecord, field), std::to_string(value)});
    }
  }
  if (auto status = persistence_.WriteCatalog(ops); !status) {
    spdlog::error("change feed: cannot record the catalog message at {} as run: {}", seq,
                  status.error().message);
  }
  advanced_.notify_all();
}

Result<PubAck> ChangeFeed::PublishSource(std::string_view head, std::string_view body,
                                         std::string_view msg_id) {
  std::string data = fmt::format("{}{}\n", kMagic, head);
  data.append(body);
  Publication publication;
  publication.subject = options_.subject;
  publication.data = data;
  publication.msg_id = msg_id;
  // Sent again with the same id while there is time: the stream keeps it once.
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.publish_timeout_ms);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    auto ack = connection_.Publish(publication, std::max<int64_t>(left, 100));
    if (ack) return *ack;
    if (Clock::now() >= deadline) {
      return MakeError(ErrorCode::kUnavailable,
                       fmt::format("the cluster's change stream did not take the source's {}: {}",
                                   head.substr(0, head.find(' ')), ack.error().ToError().message));
    }
  }
}

Status ChangeFeed::AwaitCatalog(uint64_t seq) {
  std::unique_lock lock(mutex_);
  advanced_.wait_for(lock, std::chrono::milliseconds(options_.wait_ms),
                     [&] { return ddl_seq_ >= seq || stopping_; });
  if (ddl_seq_ >= seq) return OkStatus();
  return MakeError(ErrorCode::kUnavailable,
                   fmt::format("this node has not yet read the change stream up to {}", seq));
}

Status ChangeFeed::CatchUp(std::chrono::milliseconds timeout) {
  auto state = connection_.GetStreamState(options_.stream);
  if (!state) {
    return MakeError(ErrorCode::kUnavailable,
                     fmt::format("reading the state of {}: {}", options_.stream,
                                 state.error().ToError().message));
  }
  std::unique_lock lock(mutex_);
  advanced_.wait_for(lock, timeout, [&] { return next_seq_ > state->last_seq || stopping_; });
  if (next_seq_ > state->last_seq) return OkStatus();
  return MakeError(ErrorCode::kUnavailable,
                   fmt::format("this node has read {} up to {} of {}", options_.stream,
                               next_seq_ - 1, state->last_seq));
}

int64_t ChangeFeed::SourcePosition(const std::string& source) const {
  std::lock_guard lock(mutex_);
  const auto found = source_positions_.find(source);
  return found == source_positions_.end() ? 0 : found->second;
}

bool ChangeFeed::sourced() const {
  std::lock_guard lock(mutex_);
  return sourced_;
}

}  // namespace tally::cluster
