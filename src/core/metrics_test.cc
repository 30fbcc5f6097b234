#include "core/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace tally::metrics {
namespace {

TEST(Metrics, CountersRenderWithHelpTypeAndLabels) {
  Registry registry;
  registry.AddCounter("tally_things_total", "Things done.").Add(3);
  Counter& get =
      registry.AddCounter("tally_commands_total", "Commands run, by name.", {{"command", "get"}});
  Counter& incr =
      registry.AddCounter("tally_commands_total", "Commands run, by name.", {{"command", "incr"}});
  incr.Add();
  incr.Add(41);
  get.Add(0);
  // The same name and labels: the same counter.
  EXPECT_EQ(
      &registry.AddCounter("tally_commands_total", "Commands run, by name.", {{"command", "incr"}}),
      &incr);
  EXPECT_EQ(registry.Render(),
            "# HELP tally_things_total Things done.\n"
            "# TYPE tally_things_total counter\n"
            "tally_things_total 3\n"
            "# HELP tally_commands_total Commands run, by name.\n"
            "# TYPE tally_commands_total counter\n"
            "tally_commands_total{command=\"get\"} 0\n"
            "tally_commands_total{command=\"incr\"} 42\n");
}

TEST(Metrics, EscapesHelpAndLabelValues) {
  Registry registry;
  registry
      .AddCounter("x_total", "a \\ backslash\nand a \"quote\"",
                  {{"key", "q\"b\\s\nn"}, {"other", "plain"}})
      .Add();
  EXPECT_EQ(registry.Render(),
            "# HELP x_total a \\\\ backslash\\nand a \"quote\"\n"
            "# TYPE x_total counter\n"
            // A value's \ is \x5c, its newline \x0a (then each \ escaped as the format asks).
            "x_total{key=\"q\\\"b\\\\x5cs\\\\x0an\",other=\"plain\"} 1\n");
}

TEST(Metrics, LabelValuesStayUtf8) {
  Registry registry;
  registry.AddCollector("keys", "Binary keys.", Type::kGauge, [](SampleWriter& out) {
    out.Add({{"key", std::string("\0pos:\xff\x01", 7)}}, 1);
    out.Add({{"key", "caf\xc3\xa9 \xe2\x82\xac"}}, 2);  // valid UTF-8 stays as is
    out.Add({{"key", "cut \xc3"}}, 3);
  });
  EXPECT_EQ(registry.Render(),
            "# HELP keys Binary keys.\n"
            "# TYPE keys gauge\n"
            "keys{key=\"\\\\x00pos:\\\\xff\\\\x01\"} 1\n"
            "keys{key=\"caf\xc3\xa9 \xe2\x82\xac\"} 2\n"
            "keys{key=\"cut \\\\xc3\"} 3\n");
}

// The byte 0x80 and the four characters \x80 once made one series (both \\x80), and
// Prometheus rejects a whole scrape that has a series twice.
TEST(Metrics, DifferentKeysNeverMakeOneSeries) {
  Registry registry;
  registry.AddCollector("keys", "Keys.", Type::kGauge, [](SampleWriter& out) {
    out.Add({{"key", "\x80"}}, 1);
    out.Add({{"key", "\\x80"}}, 2);
    out.Add({{"key", "\x01"}}, 3);
    out.Add({{"key", "\\x01"}}, 4);
    out.Add({{"key", "\\"}}, 5);
    out.Add({{"key", "\\x5c"}}, 6);
  });
  EXPECT_EQ(registry.Render(),
            "# HELP keys Keys.\n"
            "# TYPE keys gauge\n"
            "keys{key=\"\\\\x80\"} 1\n"
            "keys{key=\"\\\\x5cx80\"} 2\n"
            "keys{key=\"\\\\x01\"} 3\n"
            "keys{key=\"\\\\x5cx01\"} 4\n"
            "keys{key=\"\\\\x5c\"} 5\n"
            "keys{key=\"\\\\x5cx5c\"} 6\n");
}

TEST(Metrics, HistogramHasCumulativeBucketsInfSumAndCount) {
  Registry registry;
  Histogram& latency = registry.AddHistogram("tally_commit_seconds", "Commit latency.",
                                             {0.001, 0.01, 0.1}, {{"mode", "sync"}});
  for (const double value : {0.0005, 0.001, 0.002, 0.05, 3.0}) latency.Observe(value);
  Histogram& sizes = registry.AddHistogram("tally_batch_size", "Batch sizes.", {1, 10, 100});
  sizes.Observe(1);
  sizes.Observe(1000);
  EXPECT_EQ(registry.Render(),
            "# HELP tally_commit_seconds Commit latency.\n"
            "# TYPE tally_commit_seconds histogram\n"
            "tally_commit_seconds_bucket{mode=\"sync\",le=\"0.001\"} 2\n"
            "tally_commit_seconds_bucket{mode=\"sync\",le=\"0.01\"} 3\n"
            "tally_commit_seconds_bucket{mode=\"sync\",le=\"0.1\"} 4\n"
            "tally_commit_seconds_bucket{mode=\"sync\",le=\"+Inf\"} 5\n"
            "tally_commit_seconds_sum{mode=\"sync\"} 3.0535\n"
            "tally_commit_seconds_count{mode=\"sync\"} 5\n"
            "# HELP tally_batch_size Batch sizes.\n"
            "# TYPE tally_batch_size histogram\n"
            "tally_batch_size_bucket{le=\"1\"} 1\n"
            "tally_batch_size_bucket{le=\"10\"} 1\n"
            "tally_batch_size_bucket{le=\"100\"} 1\n"
            "tally_batch_size_bucket{le=\"+Inf\"} 2\n"
            "tally_batch_size_sum 1001\n"
            "tally_batch_size_count 2\n");
}

TEST(Metrics, CollectorsAndGaugesAreReadAtScrapeTime) {
  Registry registry;
  double resident = 1.5;
  registry.AddGauge("tally_resident_bytes", "Resident memory.", [&] { return resident; });
  std::vector<std::pair<std::string, uint64_t>> calls = {{"get", 2}};
  registry.AddCollector("tally_calls_total", "Calls.", Type::kCounter, [&](SampleWriter& out) {
    for (const auto& [name, count] : calls) out.Add({{"command", name}}, count);
  });
  registry.AddCollector("tally_temperature", "Signed values.", Type::kGauge, [](SampleWriter& out) {
    out.Add({{"where", "low"}}, int64_t{-3});
    out.Add({{"where", "inf"}}, std::numeric_limits<double>::infinity());
    out.Add({{"where", "-inf"}}, -std::numeric_limits<double>::infinity());
    out.Add({{"where", "nan"}}, std::nan(""));
    out.Add({{"where", "big"}}, uint64_t{18446744073709551615u});
  });
  resident = 4096;
  calls.push_back({"set", 7});
  EXPECT_EQ(registry.Render(),
            "# HELP tally_resident_bytes Resident memory.\n"
            "# TYPE tally_resident_bytes gauge\n"
            "tally_resident_bytes 4096\n"
            "# HELP tally_calls_total Calls.\n"
            "# TYPE tally_calls_total counter\n"
            "tally_calls_total{command=\"get\"} 2\n"
            "tally_calls_total{command=\"set\"} 7\n"
            "# HELP tally_temperature Signed values.\n"
            "# TYPE tally_temperature gauge\n"
            "tally_temperature{where=\"low\"} -3\n"
            "tally_temperature{where=\"inf\"} +Inf\n"
            "tally_temperature{where=\"-inf\"} -Inf\n"
            "tally_temperature{where=\"nan\"} NaN\n"
            "tally_temperature{where=\"big\"} 18446744073709551615\n");
}

TEST(Metrics, FormatsNumbersShortestAndIntegersExactly) {
  EXPECT_EQ(SampleWriter::FormatDouble(0), "0");
  EXPECT_EQ(SampleWriter::FormatDouble(-0.0), "0");
  EXPECT_EQ(SampleWriter::FormatDouble(1e6), "1000000");
  EXPECT_EQ(SampleWriter::FormatDouble(0.1), "0.1");
  EXPECT_EQ(SampleWriter::FormatDouble(2.5e-5), "2.5e-05");
  EXPECT_EQ(SampleWriter::FormatDouble(1e20), "1e+20");
}

TEST(Metrics, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(1, 4, 4), (std::vector<double>{1, 4, 16, 64}));
}

TEST(Metrics, CounterSumsEveryThreadsAdds) {
  Counter counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) counter.Add();
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter.Value(), 120000u);
}

TEST(Metrics, HistogramCountsEveryThreadsObservations) {
  Histogram histogram({10});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) histogram.Observe(i % 20);  // 0..19: half <= 10
    });
  }
  for (auto& thread : threads) thread.join();
  const Histogram::Snapshot snapshot = histogram.Read();
  EXPECT_EQ(snapshot.count, 4000u);
  EXPECT_EQ(snapshot.cumulative, (std::vector<uint64_t>{2200, 4000}));
  EXPECT_EQ(snapshot.sum, 4 * 50 * 190.0);
}

}  // namespace
}  // namespace tally::metrics
