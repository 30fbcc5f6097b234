// libFuzzer target for the Redis request parser. The input is the byte stream of one
// connection. It is fed whole, cut in two at a point that the input's last byte picks, and
// (when short) one byte at a time, under the default limits and under tiny ones; every way
// must yield the same requests and the same error. Along the way each answer is checked:
// consumed never exceeds the buffer, a request has arguments, its arguments lie inside the
// bytes it consumed or wholly outside the buffer (the parser's storage for unquoted inline
// arguments), and a request re-encoded as multibulk reads back the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_check.h"
#include "servers/redis/resp_parser.h"

namespace tally::redis {
namespace {

using Args = std::vector<std::string>;
using fuzz::Check;

// What a connection gets out of a stream.
struct Outcome {
  std::vector<Args> requests;
  std::string error;
  size_t left = 0;  // bytes never consumed, when there was no error

  bool operator==(const Outcome&) const = default;
};

std::string Multibulk(const Args& args) {
  std::string out;
  out.append("*").append(std::to_string(args.size())).append("\r\n");
  for (const std::string& arg : args) {
    out.append("$").append(std::to_string(arg.size())).append("\r\n");
    out.append(arg).append("\r\n");
  }
  return out;
}

void CheckRoundTrip(const Args& args) {
  const std::string encoded = Multibulk(args);
  // The default limits admit whatever any parser here accepted: a 64 KiB inline line holds
  // fewer than 1M arguments, each shorter than 512 MiB.
  RequestParser parser;
  size_t consumed = 0;
  std::vector<std::string_view> views;
  std::string error;
  Check(parser.Parse(encoded, &consumed, &views, &error) == ParseStatus::kComplete,
        "a re-encoded request reads back");
  Check(consumed == encoded.size(), "a re-encoded request is consumed whole");
  Check(Args(views.begin(), views.end()) == args, "a re-encoded request has the same args");
}

// Feeds `stream` in pieces that end at `cuts` (ascending) and at the stream's end.
Outcome Feed(std::string_view stream, const std::vector<size_t>& cuts, ParserLimits limits) {
  RequestParser parser(limits);
  Outcome outcome;
  std::string buffer;
  std::vector<std::string_view> views;
  size_t fed = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t end = i < cuts.size() ? cuts[i] : stream.size();
    buffer.append(stream.substr(fed, end - fed));
    fed = end;
    while (true) {
      size_t consumed = 0;
      std::string error;
      const ParseStatus status = parser.Parse(buffer, &consumed, &views, &error);
      Check(consumed <= buffer.size(), "consumed never exceeds the buffer");
      if (status == ParseStatus::kError) {
        Check(error.rfind("Protocol error: ", 0) == 0, "an error is a protocol error");
        Check(error.find_first_of("\r\n") == std::string::npos, "an error fits on one line");
        std::string again;
        Check(parser.Parse(buffer, &consumed, &views, &again) == ParseStatus::kError &&
                  again == error,
              "a failed parser keeps failing with the same error");
        outcome.error = error;
        return outcome;
      }
      if (status == ParseStatus::kNeedMore) {
        Check(views.empty(), "no arguments without a request");
        buffer.erase(0, consumed);
        break;
      }
      Check(consumed > 0, "a request takes bytes");
      Check(!views.empty(), "a request has arguments");
      const char* begin = buffer.data();
      Args args;
      for (std::string_view view : views) {
        const bool inside = view.data() >= begin && view.data() + view.size() <= begin + consumed;
        const bool outside =
            view.data() + view.size() <= begin || view.data() >= begin + buffer.size();
        Check(inside || outside, "an argument lies in its request or in the parser's storage");
        args.emplace_back(view);  // reads every byte, so ASan sees a bad view
      }
      CheckRoundTrip(args);
      outcome.requests.push_back(std::move(args));
      buffer.erase(0, consumed);
    }
  }
  outcome.left = buffer.size();
  return outcome;
}

void FuzzWithLimits(std::string_view stream, ParserLimits limits) {
  const Outcome whole = Feed(stream, {}, limits);
  const size_t cut =
      stream.empty() ? 0 : static_cast<uint8_t>(stream.back()) * (stream.size() + 1) / 256;
  Check(Feed(stream, {cut}, limits) == whole, "a stream cut in two reads the same");
  // One byte at a time costs a call per byte: only short streams, to keep the fuzzer fast.
  if (stream.size() <= 512) {
    std::vector<size_t> every_byte;
    for (size_t i = 1; i < stream.size(); ++i) every_byte.push_back(i);
    Check(Feed(stream, every_byte, limits) == whole, "a stream fed bytewise reads the same");
  }
}

}  // namespace
}  // namespace tally::redis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tally::redis::ParserLimits;
  const std::string_view stream(reinterpret_cast<const char*>(data), size);
  tally::redis::FuzzWithLimits(stream, ParserLimits{});
  // Tiny limits, so that short inputs reach every limit.
  tally::redis::FuzzWithLimits(
      stream,
      ParserLimits{.max_bulk_length = 40, .max_multibulk_length = 6, .max_inline_length = 24});
  return 0;
}
