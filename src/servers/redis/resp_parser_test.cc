#include "servers/redis/resp_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// Counts the bytes that operator new hands out, so that tests can show that a declared
// length is not allocated and that the steady state allocates nothing.
namespace {
std::atomic<size_t> g_allocated_bytes{0};
}  // namespace

// A replacement operator new can only get its memory from malloc.
void* operator new(size_t size) {
  g_allocated_bytes.fetch_add(size, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;  // NOLINT(cppcoreguidelines-no-malloc)
  throw std::bad_alloc();
}
// Not inlined: GCC would otherwise see free() meet operator new and warn of a mismatch.
[[gnu::noinline]] void operator delete(void* p) noexcept {
  std::free(p);  // NOLINT(cppcoreguidelines-no-malloc)
}
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept {
  std::free(p);  // NOLINT(cppcoreguidelines-no-malloc)
}

namespace tally::redis {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Args = std::vector<std::string>;

// What one call of Parse() answered, with the arguments copied out of their views.
struct Answer {
  ParseStatus status = ParseStatus::kError;
  size_t consumed = 0;
  Args args;
  std::string error;
};

Answer ParseOnce(RequestParser* parser, std::string_view buffer) {
  Answer answer;
  std::vector<std::string_view> views;
  answer.status = parser->Parse(buffer, &answer.consumed, &views, &answer.error);
  answer.args.assign(views.begin(), views.end());
  return answer;
}

// Everything a connection would get out of `stream` fed in pieces of `piece` bytes (0: at
// once): the requests in order, and the error that ended it, if any.
struct Outcome {
  std::vector<Args> requests;
  std::string error;
  size_t left = 0;  // bytes not consumed at the end
};

Outcome Feed(std::string_view stream, size_t piece = 0, ParserLimits limits = {}) {
  RequestParser parser(limits);
  Outcome outcome;
  std::string buffer;
  size_t fed = 0;
  while (true) {
    const size_t take = piece == 0 ? stream.size() - fed : std::min(piece, stream.size() - fed);
    buffer.append(stream.substr(fed, take));
    fed += take;
    while (true) {
      const Answer answer = ParseOnce(&parser, buffer);
      EXPECT_LE(answer.consumed, buffer.size());
      if (answer.status == ParseStatus::kError) {
        outcome.error = answer.error;
        outcome.left = buffer.size();
        return outcome;
      }
      buffer.erase(0, answer.consumed);
      if (answer.status == ParseStatus::kNeedMore) break;
      outcome.requests.push_back(answer.args);
    }
    if (fed == stream.size()) break;
  }
  outcome.left = buffer.size();
  return outcome;
}

std::string ErrorOf(std::string_view stream, ParserLimits limits = {}) {
  return Feed(stream, 0, limits).error;
}

// Builds a multibulk request from its arguments.
std::string Multibulk(const Args& args) {
  std::string out;
  out.append("*").append(std::to_string(args.size())).append("\r\n");
  for (const std::string& arg : args) {
    out.append("$").append(std::to_string(arg.size())).append("\r\n");
    out.append(arg).append("\r\n");
  }
  return out;
}

TEST(RequestParser, ReadsAWholeMultibulkRequest) {
  RequestParser parser;
  const std::string buffer = "*2\r\n$4\r\nINCR\r\n$1\r\nx\r\n";
  const Answer answer = ParseOnce(&parser, buffer);
  ASSERT_EQ(answer.status, ParseStatus::kComplete);
  EXPECT_EQ(answer.consumed, buffer.size());
  EXPECT_THAT(answer.args, ElementsAre("INCR", "x"));
}

TEST(RequestParser, MultibulkArgumentsAreViewsIntoTheBuffer) {
  RequestParser parser;
  const std::string buffer = "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
  size_t consumed;
  std::vector<std::string_view> args;
  std::string error;
  ASSERT_EQ(parser.Parse(buffer, &consumed, &args, &error), ParseStatus::kComplete);
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0].data(), buffer.data() + 8);
  EXPECT_EQ(args[1].data(), buffer.data() + 17);
}

TEST(RequestParser, ReadsPipelinedRequestsOneAtATime) {
  const std::string first = "*2\r\n$4\r\nINCR\r\n$1\r\na\r\n";
  const std::string second = "GET b\r\n";
  const std::string third = "*3\r\n$6\r\nINCRBY\r\n$1\r\nc\r\n$2\r\n10\r\n";
  const std::string bytes = first + second + third;
  const std::string_view stream = bytes;
  RequestParser parser;
  Answer answer = ParseOnce(&parser, stream);
  ASSERT_EQ(answer.status, ParseStatus::kComplete);
  EXPECT_EQ(answer.consumed, first.size());
  EXPECT_THAT(answer.args, ElementsAre("INCR", "a"));
  answer = ParseOnce(&parser, stream.substr(first.size()));
  ASSERT_EQ(answer.status, ParseStatus::kComplete);
  EXPECT_EQ(answer.consumed, second.size());
  EXPECT_THAT(answer.args, ElementsAre("GET", "b"));
  answer = ParseOnce(&parser, stream.substr(first.size() + second.size()));
  ASSERT_EQ(answer.status, ParseStatus::kComplete);
  EXPECT_EQ(answer.consumed, third.size());
  EXPECT_THAT(answer.args, ElementsAre("INCRBY", "c", "10"));
  answer = ParseOnce(&parser, "");
  EXPECT_EQ(answer.status, ParseStatus::kNeedMore);
  EXPECT_EQ(answer.consumed, 0u);
}

// Requests that must read the same however their bytes are cut.
const std::vector<std::pair<std::string, Args>>& SampleRequests() {
  static const auto* samples = new std::vector<std::pair<std::string, Args>>{
      {"*2\r\n$4\r\nINCR\r\n$1\r\nx\r\n", {"INCR", "x"}},
      {"*1\r\n$0\r\n\r\n", {""}},
      {Multibulk({"SET", "k", std::string("ab\r\ncd\0ef\r\n", 11)}),
       {"SET", "k", std::string("ab\r\ncd\0ef\r\n", 11)}},
      {"INCR x\r\n", {"INCR", "x"}},
      {"INCR x\n", {"INCR", "x"}},
      {"  SET  \"a b\"   'c d'  \r\n", {"SET", "a b", "c d"}},
      {"ECHO \"\\x41\\n\\\"\" 'it\\'s'\r\n", {"ECHO", "A\n\"", "it's"}},
      {"\r\n\n   \r\n*0\r\n*-1\r\nPING\r\n", {"PING"}},
  };
  return *samples;
}

TEST(RequestParser, ReadsEveryRequestCutAtEveryPoint) {
  for (const auto& [bytes, expected] : SampleRequests()) {
    const std::string_view stream = bytes;
    for (size_t cut = 0; cut < stream.size(); ++cut) {
      RequestParser parser;
      const Answer partial = ParseOnce(&parser, stream.substr(0, cut));
      ASSERT_EQ(partial.status, ParseStatus::kNeedMore) << stream << " cut at " << cut;
      const Answer whole = ParseOnce(&parser, stream.substr(partial.consumed));
      ASSERT_EQ(whole.status, ParseStatus::kComplete) << stream << " cut at " << cut;
      EXPECT_EQ(whole.args, expected) << stream << " cut at " << cut;
      EXPECT_EQ(partial.consumed + whole.consumed, stream.size());
    }
  }
}

TEST(RequestParser, ReadsRequestsArrivingOneByteAtATime) {
  std::string stream;
  std::vector<Args> expected;
  for (const auto& [bytes, args] : SampleRequests()) {
    stream += bytes;
    expected.push_back(args);
  }
  for (size_t piece : {1, 2, 3, 7}) {
    const Outcome outcome = Feed(stream, piece);
    EXPECT_EQ(outcome.requests, expected) << "pieces of " << piece;
    EXPECT_EQ(outcome.error, "");
    EXPECT_EQ(outcome.left, 0u);
  }
}

TEST(RequestParser, RemembersTheArgumentsAlreadyRead) {
  // The bytes of the arguments already read are overwritten between calls: if the parser
  // scanned them again it would stumble, since they are no longer a valid request.
  RequestParser parser;
  std::string buffer = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n";
  Answer answer = ParseOnce(&parser, buffer);
  ASSERT_EQ(answer.status, ParseStatus::kNeedMore);
  buffer.replace(0, buffer.size(), buffer.size(), '#');
  buffer += "$1\r\nv\r\n";
  answer = ParseOnce(&parser, buffer);
  ASSERT_EQ(answer.status, ParseStatus::kComplete);
  EXPECT_THAT(answer.args, ElementsAre("###", "#", "v"));
  EXPECT_EQ(answer.consumed, buffer.size());
}

TEST(RequestParser, ReadsARequestWithManyArgumentsInManyPieces) {
  Args args;
  for (int i = 0; i < 100000; ++i) args.push_back(std::to_string(i));
  const Outcome outcome = Feed(Multibulk(args), 1000);
  ASSERT_EQ(outcome.requests.size(), 1u);
  EXPECT_EQ(outcome.requests[0], args);
}

TEST(RequestParser, ReadsBinarySafeBulkArguments) {
  const Args args = {"SET", std::string("\0\r\n\0", 4), "\r\n", std::string(1, '\0'), "*$"};
  const Outcome outcome = Feed(Multibulk(args));
  ASSERT_EQ(outcome.requests.size(), 1u);
  EXPECT_EQ(outcome.requests[0], args);
}

TEST(RequestParser, SplitsInlineRequestsLikeRedis) {
  const std::vector<std::pair<std::string, Args>> cases = {
      {"PING\r\n", {"PING"}},
      {"PING\n", {"PING"}},
      {"PING\r\r\n", {"PING"}},  // only one CR belongs to the line end; the other is a blank
      {"\v\f GET \t x  \r\n", {"GET", "x"}},
      {"ECHO a\vb\r\n", {"ECHO", "a\vb"}},  // \v separates arguments but does not end one
      {"ECHO a\rb\r\n", {"ECHO", "a", "b"}},
      {"ECHO \"\"\r\n", {"ECHO", ""}},  // an empty quoted argument is kept
      {"ECHO ''\r\n", {"ECHO", ""}},
      {"ECHO \"a b\"\r\n", {"ECHO", "a b"}},
      {"ECHO \"a\"\t\r\n", {"ECHO", "a"}},
      {"ECHO \"a\"\vb\r\n", {"ECHO", "a", "b"}},
      {"ECHO \"\\x41\\x6a\\x6A\"\r\n", {"ECHO", "Ajj"}},
      {"ECHO \"\\xAf\"\r\n", {"ECHO", "\xaf"}},
      {"ECHO \"\\xzz\\x4\"\r\n", {"ECHO", "xzzx4"}},  // not two hex digits: \x is just x
      {"ECHO \"\\n\\r\\t\\b\\a\\\\\\\"\\q\"\r\n", {"ECHO", "\n\r\t\b\a\\\"q"}},
      {"ECHO 'a\\'b'\r\n", {"ECHO", "a'b"}},
      {"ECHO 'a\\nb\\\\c'\r\n", {"ECHO", R"(a\nb\\c)"}},  // single quotes escape only \'
      {"ECHO 'a\"b' \"a'b\"\r\n", {"ECHO", "a\"b", "a'b"}},
      {"ECHO \"a\rb\"\r\n", {"ECHO", "a\rb"}},
      {"ECHO a\"b c\"\r\n", {"ECHO", "ab c"}},  // a quote inside a word starts a quoted part
      {"ECHO a'b\\' c'\r\n", {"ECHO", "ab' c"}},
      {"ECHO a\\x41\r\n", {"ECHO", "a\\x41"}},  // escapes mean nothing outside quotes
      {"ECHO \x80\xff\r\n", {"ECHO", "\x80\xff"}},
      // Redis never reads a line holding NUL (it looks for LF with strchr); here NUL is an
      // ordinary byte.
      {std::string("ECHO a\0b\r\n", 10), {"ECHO", std::string("a\0b", 3)}},
  };
  for (const auto& [stream, expected] : cases) {
    const Outcome outcome = Feed(stream);
    EXPECT_EQ(outcome.error, "") << stream;
    ASSERT_EQ(outcome.requests.size(), 1u) << stream;
    EXPECT_EQ(outcome.requests[0], expected) << stream;
    EXPECT_EQ(outcome.left, 0u) << stream;
  }
}

TEST(RequestParser, UnquotedInlineArgumentsAreViewsIntoTheBuffer) {
  RequestParser parser;
  const std::string buffer = "SET \"key\" value\r\n";
  size_t consumed;
  std::vector<std::string_view> args;
  std::string error;
  ASSERT_EQ(parser.Parse(buffer, &consumed, &args, &error), ParseStatus::kComplete);
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[0].data(), buffer.data());
  EXPECT_EQ(args[1].data(), buffer.data() + 5);
  EXPECT_EQ(args[2].data(), buffer.data() + 10);
}

TEST(RequestParser, SkipsEmptyRequests) {
  for (const std::string empty : {"\r\n", "\n", " \t \r\n", "\v\r\n", "*0\r\n", "*-1\r\n",
                                  "*-9223372036854775808\r\n", "*0\rX"}) {
    RequestParser parser;
    Answer answer = ParseOnce(&parser, empty);
    EXPECT_EQ(answer.status, ParseStatus::kNeedMore) << empty;
    EXPECT_EQ(answer.consumed, empty.size()) << empty;
    EXPECT_THAT(answer.args, IsEmpty());

    const std::string stream = empty + empty + "PING\r\n";
    answer = ParseOnce(&parser, stream);
    EXPECT_EQ(answer.status, ParseStatus::kComplete) << empty;
    EXPECT_EQ(answer.consumed, stream.size()) << empty;
    EXPECT_THAT(answer.args, ElementsAre("PING"));
  }
}

TEST(RequestParser, KeepsAPartialRequestAfterSkippedOnes) {
  RequestParser parser;
  Answer answer = ParseOnce(&parser, "\r\n*0\r\n*1\r\n$4\r\nPI");
  ASSERT_EQ(answer.status, ParseStatus::kNeedMore);
  ASSERT_EQ(answer.consumed, 6u);
  answer = ParseOnce(&parser, "*1\r\n$4\r\nPING\r\n");
  ASSERT_EQ(answer.status, ParseStatus::kComplete);
  EXPECT_THAT(answer.args, ElementsAre("PING"));
  EXPECT_EQ(answer.consumed, 14u);
}

TEST(RequestParser, IsAsLenientAsRedisAboutLineEnds) {
  // redis-server steps over the byte after a header's CR and the two bytes after a payload
  // without looking at them; "*1\rX$4\r\nPING\r\n" is PING to it.
  EXPECT_THAT(Feed("*1\rX$4\rXPINGXY").requests, ElementsAre(ElementsAre("PING")));
  EXPECT_THAT(Feed("*1\r\n$4\r\nPINGXY*1\r\n$1\r\nx\r\n").requests,
              ElementsAre(ElementsAre("PING"), ElementsAre("x")));
  // It waits for that byte, though.
  for (const char* partial : {"*1\r", "*1\r\n$1\r", "*1\r\n$1\r\nx\r"}) {
    RequestParser parser;
    EXPECT_EQ(ParseOnce(&parser, partial).status, ParseStatus::kNeedMore) << partial;
  }
}

TEST(RequestParser, RefusesBadMultibulkCounts) {
  for (const char* stream : {"*\r\n", "*x\r\n", "*+1\r\n", "*01\r\n", "*-0\r\n", "* 1\r\n",
                             "*1 \r\n", "*1.0\r\n", "*99999999999999999999\r\n", "*1048577\r\n"}) {
    EXPECT_EQ(ErrorOf(stream), "Protocol error: invalid multibulk length") << stream;
  }
}

TEST(RequestParser, RefusesBadBulkLengths) {
  for (const char* stream :
       {"*1\r\n$\r\n", "*1\r\n$-1\r\n", "*1\r\n$-0\r\n", "*1\r\n$+1\r\n", "*1\r\n$01\r\n",
        "*1\r\n$1 \r\n", "*1\r\n$x\r\n", "*1\r\n$536870913\r\n", "*1\r\n$9223372036854775807\r\n",
        "*1\r\n$9223372036854775808\r\n"}) {
    EXPECT_EQ(ErrorOf(stream), "Protocol error: invalid bulk length") << stream;
  }
}

TEST(RequestParser, RefusesAnythingButABulkInsideAMultibulk) {
  EXPECT_EQ(ErrorOf("*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"),
            "Protocol error: expected '$', got 'f'");
  EXPECT_EQ(ErrorOf("*1\r\n:1\r\n"), "Protocol error: expected '$', got ':'");
  EXPECT_EQ(ErrorOf("*1\r\n*1\r\n"), "Protocol error: expected '$', got '*'");
  EXPECT_EQ(ErrorOf("*1\r\n\xff\r\n"), "Protocol error: expected '$', got '\xff'");
  // CR and LF cannot stand in an error line: Redis shows them as spaces.
  EXPECT_EQ(ErrorOf("*1\r\n\r\n"), "Protocol error: expected '$', got ' '");
  EXPECT_EQ(ErrorOf("*1\r\n\n\r\n"), "Protocol error: expected '$', got ' '");
  // The type is judged only once the whole line is there.
  EXPECT_EQ(Feed("*1\r\nfoo").error, "");
}

TEST(RequestParser, RefusesUnbalancedQuotes) {
  for (const char* stream :
       {"ECHO \"abc\r\n", "ECHO 'abc\r\n", "ECHO \"a\"b\r\n", "ECHO 'a'b\r\n", "ECHO a\"b c\"d\r\n",
        "ECHO \"a\\\"\r\n", "ECHO \"a\\\r\n", "ECHO \"a\"\"b\"\r\n", "ECHO '\r\n", "\"\n"}) {
    EXPECT_EQ(ErrorOf(stream), "Protocol error: unbalanced quotes in request") << stream;
  }
}

TEST(RequestParser, RefusesTooLongLines) {
  const ParserLimits limits{.max_inline_length = 16};
  // Up to the limit a line without its end is waited for; one byte more is refused.
  EXPECT_EQ(Feed(std::string(16, 'A'), 0, limits).error, "");
  EXPECT_EQ(ErrorOf(std::string(17, 'A'), limits), "Protocol error: too big inline request");
  EXPECT_EQ(Feed("*" + std::string(15, '1'), 0, limits).error, "");
  EXPECT_EQ(ErrorOf("*" + std::string(16, '1'), limits),
            "Protocol error: too big mbulk count string");
  EXPECT_EQ(Feed("*1\r\n$" + std::string(15, '1'), 0, limits).error, "");
  EXPECT_EQ(ErrorOf("*1\r\n$" + std::string(16, '1'), limits),
            "Protocol error: too big bulk count string");
  // Too long is judged before what the line holds, as Redis does.
  EXPECT_EQ(ErrorOf("*1\r\n" + std::string(17, 'X'), limits),
            "Protocol error: too big bulk count string");
  // A line longer than the limit is refused even when its end has arrived with it, so the
  // answer does not depend on how the bytes were cut.
  EXPECT_EQ(ErrorOf(std::string(17, 'A') + "\r\n", limits),
            "Protocol error: too big inline request");
  EXPECT_THAT(Feed(std::string(14, 'A') + "\r\n", 0, limits).requests,
              ElementsAre(ElementsAre(std::string(14, 'A'))));
  // A bulk payload is not a line: it may be far longer.
  EXPECT_THAT(Feed(Multibulk({std::string(100, 'p')}), 0, limits).requests,
              ElementsAre(ElementsAre(std::string(100, 'p'))));
}

// Counts and lengths of one to four digits are read without the general line search: the
// same requests, errors and limits either way, whatever the cut.
TEST(RequestParser, ReadsShortAndLongLengthsAlike) {
  for (const size_t size : {0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 12345}) {
    const Args request = {"SET", std::string(size, 'v')};
    for (const size_t piece : {0, 1, 7}) {
      EXPECT_THAT(Feed(Multibulk(request), piece).requests, ElementsAre(request))
          << size << " bytes in pieces of " << piece;
    }
  }
  Args many(1000, "a");
  EXPECT_THAT(Feed(Multibulk(many), 3).requests, ElementsAre(many));
  // A line the limit refuses is refused even when it is short enough to be read at once.
  const ParserLimits tiny{.max_inline_length = 2};
  EXPECT_EQ(ErrorOf("*123\r\n", tiny), "Protocol error: too big mbulk count string");
  EXPECT_EQ(ErrorOf("*1\r\n$100\r\n", tiny), "Protocol error: too big bulk count string");
  EXPECT_THAT(Feed("*1\r\n$2\r\nab\r\n", 1, tiny).requests, ElementsAre(ElementsAre("ab")));
  // A length is only taken once the byte after its CR is there, as Redis does.
  EXPECT_EQ(Feed("*1\r\n$2\r").left, 7u);
  EXPECT_EQ(ErrorOf("*1\r\n$2x\r\nab\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(ErrorOf("*1\r\n#2\r\nab\r\n"), "Protocol error: expected '$', got '#'");
}

TEST(RequestParser, RefusesTooLongLinesWithTheDefaultLimit) {
  EXPECT_EQ(Feed(std::string(size_t{64} * 1024, 'A')).error, "");
  EXPECT_EQ(ErrorOf(std::string(size_t{64} * 1024 + 1, 'A')),
            "Protocol error: too big inline request");
  EXPECT_EQ(ErrorOf("*1\r\n$" + std::string(size_t{64} * 1024, '1')),
            "Protocol error: too big bulk count string");
}

TEST(RequestParser, AppliesTheCountAndLengthLimits) {
  const ParserLimits limits{.max_bulk_length = 5, .max_multibulk_length = 3};
  EXPECT_THAT(Feed(Multibulk({"a", "b", "12345"}), 0, limits).requests,
              ElementsAre(ElementsAre("a", "b", "12345")));
  EXPECT_EQ(ErrorOf("*4\r\n", limits), "Protocol error: invalid multibulk length");
  EXPECT_EQ(ErrorOf("*1\r\n$6\r\n", limits), "Protocol error: invalid bulk length");
}

TEST(RequestParser, DoesNotAllocateWhatALengthDeclares) {
  RequestParser parser;
  const size_t before = g_allocated_bytes.load();
  Answer answer = ParseOnce(&parser, "*1048576\r\n$536870912\r\nabc");
  EXPECT_EQ(answer.status, ParseStatus::kNeedMore);
  EXPECT_LT(g_allocated_bytes.load() - before, 64u * 1024);
}

TEST(RequestParser, AllocatesNothingPerRequestOnceWarm) {
  const std::string stream =
      "*3\r\n$6\r\nINCRBY\r\n$7\r\ncounter\r\n$2\r\n10\r\n"
      "INCR \"a key\" 'it\\'s' \"\\x41\"\r\n"
      "\r\n*0\r\n";
  RequestParser parser;
  std::vector<std::string_view> args;
  std::string error;
  size_t allocated = 0;
  for (int round = 0; round < 100; ++round) {
    if (round == 1) allocated = g_allocated_bytes.load();
    std::string_view rest = stream;
    while (true) {
      size_t consumed;
      const ParseStatus status = parser.Parse(rest, &consumed, &args, &error);
      ASSERT_NE(status, ParseStatus::kError);
      rest.remove_prefix(consumed);
      if (status == ParseStatus::kNeedMore) break;
    }
    ASSERT_TRUE(rest.empty());
  }
  EXPECT_EQ(g_allocated_bytes.load(), allocated);
}

TEST(RequestParser, StaysFailedUntilReset) {
  RequestParser parser;
  Answer answer = ParseOnce(&parser, "*x\r\n");
  ASSERT_EQ(answer.status, ParseStatus::kError);
  answer = ParseOnce(&parser, "PING\r\n");
  EXPECT_EQ(answer.status, ParseStatus::kError);
  EXPECT_EQ(answer.error, "Protocol error: invalid multibulk length");
  parser.Reset();
  answer = ParseOnce(&parser, "PING\r\n");
  EXPECT_EQ(answer.status, ParseStatus::kComplete);
  EXPECT_THAT(answer.args, ElementsAre("PING"));
}

TEST(RequestParser, ResetForgetsAPartialRequest) {
  RequestParser parser;
  ASSERT_EQ(ParseOnce(&parser, "*2\r\n$3\r\nGET\r\n").status, ParseStatus::kNeedMore);
  parser.Reset();
  const Answer answer = ParseOnce(&parser, "PING\r\n");
  EXPECT_EQ(answer.status, ParseStatus::kComplete);
  EXPECT_THAT(answer.args, ElementsAre("PING"));
}

}  // namespace
}  // namespace tally::redis
