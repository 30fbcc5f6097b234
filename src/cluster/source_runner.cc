#include "cluster/source_runner.h"

#include <spdlog/spdlog.h>

#include "core/thread_name.h"

namespace tally::cluster {
namespace {

// How often the runner looks at partition 0's owner, and waits before starting a consumer
// again after it could not start.
constexpr auto kLookEvery = std::chrono::milliseconds(200);
constexpr auto kRetryAfter = std::chrono::seconds(3);

}  // namespace

SourceRunner::SourceRunner(ClusterPersistence& persistence, ChangeFeed& feed,
                           engine::Engine& engine, derived::DerivedCounters& derived,
                           postgres::PostgresSourceOptions options)
    : persistence_(persistence),
      feed_(feed),
      engine_(engine),
      derived_(derived),
      options_(std::move(options)) {}

SourceRunner::~SourceRunner() { Stop(); }

void SourceRunner::Start() {
  thread_ = NamedThread("source runner", [this] { Run(); });
}

void SourceRunner::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SourceRunner::Run() {
  auto next_try = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, kLookEvery, [this] { return stopping_; });
      if (stopping_) break;
    }
    const PartitionStatus status = persistence_.status(0);
    const bool owned = status.role == PartitionRole::kOwned;
    const auto term = static_cast<int64_t>(status.owner.term);
    int64_t running = 0;
    {
      std::lock_guard lock(mutex_);
      running = source_ != nullptr ? claim_ : 0;
    }
    if (running != 0 && (!owned || term != running)) {
      spdlog::info("postgres source: this node no longer owns partition 0: its consumer stops");
      StopConsumer();
      running = 0;
    }
    if (owned && running == 0 && std::chrono::steady_clock::now() >= next_try) {
      StartConsumer(term);
      std::lock_guard lock(mutex_);
      if (source_ == nullptr) next_try = std::chrono::steady_clock::now() + kRetryAfter;
    }
  }
  StopConsumer();
}

void SourceRunner::StartConsumer(int64_t claim) {
  spdlog::info("postgres source: this node owns partition 0 (term {}): it consumes slot {}", claim,
               options_.slot);
  auto target = std::make_unique<ClusterSourceTarget>(feed_, derived_, options_.slot, claim);
  // The catalog as the stream has it: the sources to follow and the counters' states.
  if (auto caught_up = feed_.CatchUp(std::chrono::seconds(30)); !caught_up) {
    spdlog::warn("postgres source: not started: {}", caught_up.error().message);
    std::lock_guard lock(mutex_);
    last_error_ = caught_up.error().message;
    return;
  }
  auto source =
      std::make_unique<postgres::PostgresSource>(engine_, derived_, options_, target.get());
  if (auto started = source->Start(); !started) {
    spdlog::error("postgres source: not started: {}; trying again in {} s", started.error().message,
                  kRetryAfter.count());
    std::lock_guard lock(mutex_);
    last_error_ = started.error().message;
    return;
  }
  std::lock_guard lock(mutex_);
  last_error_.clear();
  target_ = std::move(target);
  source_ = std::move(source);
  claim_ = claim;
}

void SourceRunner::StopConsumer() {
  std::unique_ptr<postgres::PostgresSource> source;
  std::unique_ptr<ClusterSourceTarget> target;
  {
    std::lock_guard lock(mutex_);
    source = std::move(source_);
    target = std::move(target_);
    claim_ = 0;
  }
  if (source != nullptr) source->Stop();
}

StatusReport SourceRunner::Report() const {
  std::lock_guard lock(mutex_);
  if (source_ != nullptr) {
    StatusReport report = source_->Report();
    report.push_back({"consumer", std::string("this node")});
    report.push_back({"claim", claim_});
    return report;
  }
  const PartitionStatus status = persistence_.status(0);
  StatusReport report;
  report.push_back({"state", std::string(last_error_.empty() ? "elsewhere" : "failed")});
  report.push_back({"consumer", status.owner.claim.node_name});
  report.push_back({"error", last_error_});
  return report;
}

std::optional<postgres::PostgresSource::Stats> SourceRunner::ConsumerStats() const {
  std::lock_guard lock(mutex_);
  if (source_ != nullptr) return source_->stats();
  if (last_error_.empty() || persistence_.status(0).role != PartitionRole::kOwned) {
    return std::nullopt;
  }
  postgres::PostgresSource::Stats failed;
  failed.state = "failed";
  failed.error = last_error_;
  return failed;
}

}  // namespace tally::cluster
