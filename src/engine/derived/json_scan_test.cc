// Tests of the JSON scanner (json_scan.h): paths, which numbers simdjson holds (checked
// against simdjson itself), masking, spellings by path and where invalid JSON lies.
#include "engine/derived/json_scan.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>
#include <utility>
#include <vector>

namespace tally::derived {
namespace {

// Every number of `text` as "path=spelling" ("!" after the spelling when simdjson does not
// hold it), with the scan's verdict.
std::pair<std::vector<std::string>, std::optional<size_t>> Numbers(std::string_view text) {
  std::vector<std::string> numbers;
  const std::optional<size_t> error = ScanJson(text, [&](const JsonNumber& number) {
    std::string entry;
    for (const uint32_t step : number.path) entry += std::to_string(step) + ".";
    entry.back() = '=';
    entry += std::string(number.text) + (number.held ? "" : "!");
    EXPECT_EQ(text.substr(number.offset, number.text.size()), number.text);
    numbers.push_back(std::move(entry));
  });
  return {numbers, error};
}

TEST(JsonScanTest, PathsCountValuesElementsAndFields) {
  const auto [numbers, error] =
      Numbers(R"({"a": 1, "b": [true, 2, {"c": [3, -4.5e1]}], "d": {}} 5 [[6], [], 7])");
  EXPECT_EQ(error, std::nullopt);
  EXPECT_EQ(numbers, (std::vector<std::string>{"0.0=1", "0.1.1=2", "0.1.2.0.0=3",
                                               "0.1.2.0.1=-4.5e1", "1=5", "2.0.0=6", "2.2=7"}));
  EXPECT_EQ(Numbers("  \n").second, std::nullopt);
  EXPECT_EQ(Numbers(R"({"a": 1, "b": 2,})").second, 16U);
  EXPECT_EQ(Numbers("[1, 2] 01").second, 7U);
}

TEST(JsonScanTest, HeldNumbersAreWhatSimdjsonHolds) {
  simdjson::dom::parser parser;
  for (const std::string_view number : {"0",
                                        "-0",
                                        "9223372036854775807",
                                        "9223372036854775808",
                                        "18446744073709551615",
                                        "18446744073709551616",
                                        "99999999999999999999",
                                        "-9223372036854775808",
                                        "-9223372036854775809",
                                        "-18446744073709551615",
                                        "1.7976931348623157e308",
                                        "1.7976931348623159e308",
                                        "1.8e308",
                                        "-1.8e308",
                                        "1e308",
                                        "1e309",
                                        "10e307",
                                        "100e307",
                                        "0.001e311",
                                        "0.0001e312",
                                        "1e-400",
                                        "-1e-400",
                                        "0e99999",
                                        "0.0e99999",
                                        "4.9e-324",
                                        "2e-324",
                                        "1E400",
                                        "1e+400",
                                        "123456789012345678901234567890.5",
                                        "100000000000000000000000000000000000000"}) {
    const auto [numbers, error] = Numbers(number);
    ASSERT_EQ(error, std::nullopt) << number;
    ASSERT_EQ(numbers.size(), 1U) << number;
    const bool held = numbers[0].back() != '!';
    simdjson::dom::element element;
    const simdjson::padded_string padded(number);
    EXPECT_EQ(held, parser.parse(padded).get(element) == simdjson::SUCCESS) << number;
  }
}

TEST(JsonScanTest, MaskKeepsOffsetsAndOnlyUnheldNumbers) {
  std::string text =
      R"([99999999999999999999, 1e400, 7, -1e999,{"x":1e-999}] 18446744073709551616)";
  EXPECT_EQ(MaskUnheldNumbers(text.data(), text.size()), 4U);
  EXPECT_EQ(text, R"([0.0                 , 0.0  , 7, 0.0   ,{"x":1e-999}] 0.0                 )");
  simdjson::dom::parser parser;
  simdjson::dom::document_stream stream;
  const simdjson::padded_string padded(text);
  ASSERT_EQ(parser.parse_many(padded).get(stream), simdjson::SUCCESS);
  size_t values = 0;
  for (auto value : stream) {
    simdjson::dom::element element;
    EXPECT_EQ(value.get(element), simdjson::SUCCESS);
    ++values;
  }
  EXPECT_EQ(values, 2U);
  // Numbers before invalid JSON are masked; nothing after it.
  text = "[1e400, 2] [,] 1e400";
  EXPECT_EQ(MaskUnheldNumbers(text.data(), text.size()), 1U);
  EXPECT_EQ(text, "[0.0  , 2] [,] 1e400");
}

TEST(JsonScanTest, NumberAtAPath) {
  const std::string_view text = R"({"a": [1, 2e999], "b": 3} {"c": -4})";
  const std::vector<uint32_t> second = {0, 0, 1};
  const std::vector<uint32_t> b = {0, 1};
  const std::vector<uint32_t> c = {1, 0};
  const std::vector<uint32_t> a = {0, 0};
  const std::vector<uint32_t> none = {2, 0};
  EXPECT_EQ(NumberAt(text, second), "2e999");
  EXPECT_EQ(NumberAt(text, b), "3");
  EXPECT_EQ(NumberAt(text, c), "-4");
  EXPECT_EQ(NumberAt(text, a), std::nullopt);  // an array, not a number
  EXPECT_EQ(NumberAt(text, none), std::nullopt);
}

TEST(JsonScanTest, LocatesInvalidJson) {
  EXPECT_EQ(LocateJsonError("{\"a\": tru}", false), 6U);
  EXPECT_EQ(LocateJsonError("{\"a\": \"x}", false), 6U);
  EXPECT_EQ(LocateJsonError("{\"a\": \"\\ud800\"}", false), 7U);
  EXPECT_EQ(LocateJsonError("{\"a\": 1.}", false), 6U);
  EXPECT_EQ(LocateJsonError(std::string(1025, '[') + std::string(1025, ']'), false), 1024U);
  EXPECT_EQ(LocateJsonError("[1e400, 99999999999999999999]", false), std::nullopt);
  EXPECT_EQ(LocateJsonError("{\"a\": \"\xff\"}", false), 7U);
  EXPECT_EQ(LocateJsonError("[1] \xc3", true), 4U);
  EXPECT_EQ(LocateJsonError("[1]", true), std::nullopt);
}

}  // namespace
}  // namespace tally::derived
