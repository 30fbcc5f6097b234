// Metrics: tally's own small metrics library (Debian has no Prometheus client library for
// C++ that fits): counters, gauges read at scrape time, fixed-bucket histograms, and a
// Registry that renders them in the Prometheus text exposition format 0.0.4.
//
// Cost on the hot path. Counter::Add is one relaxed atomic add on a cache line picked per
// thread, so threads counting the same thing do not bounce one line between cores;
// Histogram::Observe is a short search of its bounds and two relaxed adds. Nothing locks
// per update. A figure a component already keeps (its own atomics, a size) is not counted
// twice: a collector reads it at scrape time.
//
// The text (Registry::Render), one family after another in registration order:
//   # HELP <name> <help, with \ and newline escaped as \\ and \n>
//   # TYPE <name> counter|gauge|histogram
//   <name>{<label>="<value>",...} <value>
// where a label value is any bytes made unambiguous text: valid UTF-8 and printable ASCII
// as they are, `\` and every other byte as \xNN (core/escape.h), and then, as the format
// asks, each \ and " escaped with a \ (so the byte 0x80 is written \\x80, the text
// "\x80" \\x5cx80: different keys never make one series);
// a histogram's samples being, per label set,
//   <name>_bucket{...,le="<bound>"} <count of observations <= bound>   each bound, then
//   <name>_bucket{...,le="+Inf"} <count>, <name>_sum{...} <sum>, <name>_count{...} <count>
// Values: integers exactly, other numbers in the shortest form that reads back the same,
// +Inf, -Inf, NaN.
//
// Thread-safety: everything may be called from any thread. Registration takes a lock; so
// does Render, which runs the collectors under it (a collector must not register).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tally::metrics {

// Label names and values of one series, in the order they are written.
using Labels = std::vector<std::pair<std::string, std::string>>;

enum class Type { kCounter, kGauge, kHistogram };

// A count that only grows. Add() from any thread without a lock.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Add(uint64_t n = 1) { slots_[ThreadSlot()].value.fetch_add(n, std::memory_order_relaxed); }
  // The sum over the slots: exact once the adders are quiet, never torn.
  uint64_t Value() const;

 private:
  static constexpr size_t kSlots = 8;
  struct alignas(64) Slot {
    std::atomic<uint64_t> value{0};
  };
  // A thread's slot: threads take slots round-robin as they first count anything.
  static size_t ThreadSlot();
  std::array<Slot, kSlots> slots_{};
};

// Counts observations into fixed buckets, and sums them. Observe() from any thread
// without a lock.
class Histogram {
 public:
  // REQUIRES: `bounds` finite and strictly increasing (the +Inf bucket is implied).
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0};
};

// `count` bounds: start, start*factor, start*factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, size_t count);

// Where a collector writes its family's samples at scrape time.
class SampleWriter {
 public:
  template <typename T>
  requires std::is_arithmetic_v<T>
  void Add(const Labels& labels, T value) {
    if constexpr (std::is_floating_point_v<T>) {
      AddText(labels, FormatDouble(static_cast<double>(value)));
    } else if constexpr (std::is_signed_v<T>) {
      AddText(labels, std::to_string(static_cast<int64_t>(value)));
    } else {
      AddText(labels, std::to_string(static_cast<uint64_t>(value)));
    }
  }
  template <typename T>
  requires std::is_arithmetic_v<T>
  void Add(T value) { Add(Labels{}, value); }

  // A value as the format spells it: integers exactly, +Inf, -Inf, NaN.
  static std::string FormatDouble(double value);

 private:
  friend class Registry;
  SampleWriter(std::string_view name, std::string* out) : name_(name), out_(out) {}
  void AddText(const Labels& labels, std::string_view value);
  std::string_view name_;
  std::string* out_;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The counter `name` with `labels`, added on first call; later calls with the same name
  // and labels return the same counter. The reference lives as long as the registry.
  // REQUIRES: a valid name (by convention ending in _total); `name` is not a family of
  // another type; the same `help` on every call.
  Counter& AddCounter(std::string_view name, std::string_view help, Labels labels = {});

  // The same for a histogram with the given bounds (see Histogram).
  Histogram& AddHistogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                          Labels labels = {});

  // A family whose samples `collect` writes at scrape time: the way to expose figures a
  // component keeps anyway. REQUIRES: `type` is kCounter or kGauge; `name` is new;
  // whatever `collect` reads outlives the registry's last Render().
  using Collect = std::function<void(SampleWriter&)>;
  void AddCollector(std::string_view name, std::string_view help, Type type, Collect collect);

  // A gauge of one series, read at scrape time.
  void AddGauge(std::string_view name, std::string_view help, std::function<double()> read);

  // The text exposition (format 0.0.4) of every family.
  std::string Render() const;

  // The Content-Type of Render()'s text.
  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Family;
  Family& FamilyFor(std::string_view name, std::string_view help, Type type);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Family>> families_;  // guarded by mutex_
};

inline size_t Counter::ThreadSlot() {
  static std::atomic<size_t> next{0};
  thread_local const size_t slot = next.fetch_add(1, std::memory_order_relaxed) % kSlots;
  return slot;
}

}  // namespace tally::metrics
