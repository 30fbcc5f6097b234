#include "core/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "core/escape.h"

namespace tally::metrics {
namespace {

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names, the same without ':' for label names.
[[maybe_unused]] bool IsValidName(std::string_view name, bool metric) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(letter || (metric && c == ':') || (i > 0 && digit))) return false;
  }
  return true;
}

[[maybe_unused]] bool AreValidLabels(const Labels& labels) {
  return std::ranges::all_of(labels, [](const auto& label) {
    return IsValidName(label.first, false) && label.first != "le";
  });
}

// HELP text (tally's own): \ and newline escaped as the format asks.
void AppendHelp(std::string_view text, std::string* out) {
  for (const char c : text) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

// A label value, between its quotes. Values may be counter keys, i.e. any bytes, and two
// different keys must make two different series (a duplicate series fails the whole
// scrape): the value is first made printable and unambiguous (core/escape.h: valid UTF-8
// and printable ASCII as they are, \ and every other byte as \xNN), then its \ and " are
// escaped as the format asks. The byte 0x80 so reads \x80 and the text "\x80" \x5cx80.
void AppendLabelValue(std::string_view value, std::string* out) {
  std::string printable;
  AppendPrintable(value, KeepUtf8::kYes, &printable);
  for (const char c : printable) {
    if (c == '\\' || c == '"') out->push_back('\\');
    out->push_back(c);
  }
}

// name{a="x",b="y"} or name{a="x",le="0.5"}, without the value.
void AppendSeries(std::string_view name, std::string_view suffix, const Labels& labels,
                  std::string_view le, std::string* out) {
  out->append(name).append(suffix);
  if (labels.empty() && le.empty()) return;
  out->push_back('{');
  bool first = true;
  for (const auto& [label, value] : labels) {
    if (!first) out->push_back(',');
    first = false;
    out->append(label).append("=\"");
    AppendLabelValue(value, out);
    out->push_back('"');
  }
  if (!le.empty()) {
    if (!first) out->push_back(',');
    out->append("le=\"").append(le).push_back('"');
  }
  out->push_back('}');
}

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      break;
  }
  return "histogram";
}

}  // namespace

uint64_t Counter::Value() const {
  uint64_t total = 0;
  for (const Slot& slot : slots_) total += slot.value.load(std::memory_order_relaxed);
  return total;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  assert(std::ranges::adjacent_find(bounds_, std::greater_equal<>()) == bounds_.end());
  assert(std::ranges::all_of(bounds_, [](double b) { return std::isfinite(b); }));
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // The first bound >= value: "le" buckets hold the observations at or below their bound.
  const auto bucket =
      static_cast<size_t>(std::ranges::lower_bound(bounds_, value) - bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.cumulative.reserve(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    snapshot.count += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative.push_back(snapshot.count);
  }
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

std::vector<double> ExponentialBuckets(double start, double factor, size_t count) {
  std::vector<double> bounds;
  bounds.reserve(count);
  for (double bound = start; bounds.size() < count; bound *= factor) bounds.push_back(bound);
  return bounds;
}

std::string SampleWriter::FormatDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integral values within int64 exactly, as integers; the rest in the shortest form.
  if (value == std::trunc(value) && std::fabs(value) < 9.2e18) {
    return std::to_string(static_cast<int64_t>(value));
  }
  return fmt::format("{}", value);
}

void SampleWriter::AddText(const Labels& labels, std::string_view value) {
  assert(AreValidLabels(labels));
  AppendSeries(name_, "", labels, "", out_);
  out_->push_back(' ');
  out_->append(value);
  out_->push_back('\n');
}

struct Registry::Family {
  std::string name;
  std::string help;
  Type type = Type::kCounter;
  struct Child {
    Labels labels;
    std::unique_ptr<Counter> counter;      // kCounter
    std::unique_ptr<Histogram> histogram;  // kHistogram
  };
  std::vector<Child> children;
  Collect collect;  // set for a collected family, which has no children
};

Registry::Registry() = default;
Registry::~Registry() = default;

Registry::Family& Registry::FamilyFor(std::string_view name, std::string_view help, Type type) {
  assert(IsValidName(name, true));
  for (const auto& family : families_) {
    if (family->name == name) {
      assert(family->type == type && !family->collect && family->help == help);
      return *family;
    }
  }
  auto family = std::make_unique<Family>();
  family->name = name;
  family->help = help;
  family->type = type;
  families_.push_back(std::move(family));
  return *families_.back();
}

Counter& Registry::AddCounter(std::string_view name, std::string_view help, Labels labels) {
  assert(AreValidLabels(labels));
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kCounter);
  for (const Family::Child& child : family.children) {
    if (child.labels == labels) return *child.counter;
  }
  family.children.push_back({std::move(labels), std::make_unique<Counter>(), nullptr});
  return *family.children.back().counter;
}

Histogram& Registry::AddHistogram(std::string_view name, std::string_view help,
                                  std::vector<double> bounds, Labels labels) {
  assert(AreValidLabels(labels));
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kHistogram);
  for (const Family::Child& child : family.children) {
    if (child.labels == labels) {
      assert(child.histogram->bounds() == bounds);
      return *child.histogram;
    }
  }
  family.children.push_back(
      {std::move(labels), nullptr, std::make_unique<Histogram>(std::move(bounds))});
  return *family.children.back().histogram;
}

void Registry::AddCollector(std::string_view name, std::string_view help, Type type,
                            Collect collect) {
  assert(type != Type::kHistogram && collect);
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, type);
  assert(family.children.empty() && !family.collect);
  family.collect = std::move(collect);
}

void Registry::AddGauge(std::string_view name, std::string_view help,
                        std::function<double()> read) {
  AddCollector(name, help, Type::kGauge,
               [read = std::move(read)](SampleWriter& out) { out.Add(read()); });
}

std::string Registry::Render() const {
  std::string out;
  std::lock_guard lock(mutex_);
  for (const auto& family : families_) {
    out.append("# HELP ").append(family->name).push_back(' ');
    AppendHelp(family->help, &out);
    out.append("\n# TYPE ").append(family->name).push_back(' ');
    out.append(TypeName(family->type)).push_back('\n');
    if (family->collect) {
      SampleWriter writer(family->name, &out);
      family->collect(writer);
      continue;
    }
    for (const Family::Child& child : family->children) {
      if (child.counter) {
        AppendSeries(family->name, "", child.labels, "", &out);
        fmt::format_to(std::back_inserter(out), " {}\n", child.counter->Value());
        continue;
      }
      const Histogram& histogram = *child.histogram;
      const Histogram::Snapshot snapshot = histogram.Read();
      for (size_t i = 0; i <= histogram.bounds().size(); ++i) {
        const std::string le = i < histogram.bounds().size()
                                   ? SampleWriter::FormatDouble(histogram.bounds()[i])
                                   : std::string("+Inf");
        AppendSeries(family->name, "_bucket", child.labels, le, &out);
        fmt::format_to(std::back_inserter(out), " {}\n", snapshot.cumulative[i]);
      }
      AppendSeries(family->name, "_sum", child.labels, "", &out);
      out.push_back(' ');
      out.append(SampleWriter::FormatDouble(snapshot.sum)).push_back('\n');
      AppendSeries(family->name, "_count", child.labels, "", &out);
      fmt::format_to(std::back_inserter(out), " {}\n", snapshot.count);
    }
  }
  return out;
}

}  // namespace tally::metrics
