// What the client layer does without a server: messages, connection strings, the failures
// of connecting to nothing or to a server that never answers, and reading result values
// (results built by hand with libpq's own functions).
#include "sources/postgres/pg_client.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/test_port.h"

namespace tally::postgres {
namespace {

TEST(OneLine, JoinsLinesAndKeepsSpacesWithinThem) {
  EXPECT_EQ(OneLine("connection to server failed: Connection refused\n\tIs the server running "
                    "on that host?\n"),
            "connection to server failed: Connection refused Is the server running on that host?");
  // The server's own double space stays; the blanks around a break become one space.
  EXPECT_EQ(OneLine("FATAL:  password authentication failed  \r\n  for user \"a\"\n"),
            "FATAL:  password authentication failed for user \"a\"");
  EXPECT_EQ(OneLine("  \n\tleading and trailing \t\n "), "leading and trailing");
  EXPECT_EQ(OneLine("one\ttab"), "one tab");
  EXPECT_EQ(OneLine(""), "");
  EXPECT_EQ(OneLine("\n\n"), "");
}

TEST(ConnectionError, NamesAMissingConnection) {
  EXPECT_EQ(ConnectionError(nullptr), "out of memory");
}

TEST(ParseConnString, ReadsBothForms) {
  auto keywords = ParseConnString("host=127.0.0.1 port=5433 dbname='my db' user=alice");
  ASSERT_TRUE(keywords) << keywords.error().message;
  ASSERT_NE(FindParam(*keywords, "dbname"), nullptr);
  EXPECT_EQ(*FindParam(*keywords, "dbname"), "my db");
  EXPECT_EQ(*FindParam(*keywords, "port"), "5433");
  EXPECT_EQ(FindParam(*keywords, "password"), nullptr);

  auto uri = ParseConnString("postgresql://alice:pw@127.0.0.1:5433/posts?application_name=x");
  ASSERT_TRUE(uri) << uri.error().message;
  EXPECT_EQ(*FindParam(*uri, "host"), "127.0.0.1");
  EXPECT_EQ(*FindParam(*uri, "port"), "5433");
  EXPECT_EQ(*FindParam(*uri, "user"), "alice");
  EXPECT_EQ(*FindParam(*uri, "password"), "pw");
  EXPECT_EQ(*FindParam(*uri, "dbname"), "posts");
  EXPECT_EQ(*FindParam(*uri, "application_name"), "x");
}

TEST(ParseConnString, GivesLibpqsReasonAlone) {
  struct Case {
    const char* conninfo;
    const char* reason;
  };
  for (const Case& c : {
           Case{"nonsense", "missing \"=\" after \"nonsense\" in connection info string"},
           Case{"host=127.0.0.1 colour=blue", "invalid connection option \"colour\""},
           Case{"postgresql://127.0.0.1:5432/postgres?colour=blue",
                "invalid URI query parameter: \"colour\""},
       }) {
    auto parsed = ParseConnString(c.conninfo);
    ASSERT_FALSE(parsed) << c.conninfo;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(parsed.error().message, c.reason);
  }
}

TEST(FormatConnString, IsReadBackTheSame) {
  const ConnParams params = {{"host", "127.0.0.1"},
                             {"password", "it's a \\secret\\ with spaces"},
                             {"options", "-c DateStyle=ISO -c TimeZone=UTC"},
                             {"application_name", ""}};
  const std::string text = FormatConnString(params);
  EXPECT_EQ(text.substr(0, 17), "host='127.0.0.1' ");
  auto parsed = ParseConnString(text);
  ASSERT_TRUE(parsed) << parsed.error().message << ": " << text;
  // libpq lists its keywords in its own order.
  ConnParams expected = params;
  std::ranges::sort(expected);
  std::ranges::sort(*parsed);
  EXPECT_EQ(*parsed, expected);
}

TEST(Connect, NamesWhomItTriedAndWhy) {
  testing::TestPort nobody;  // never listens: refuses
  const ConnParams params = {{"host", "127.0.0.1"},    {"port", std::to_string(nobody.port())},
                             {"dbname", "posts"},      {"user", "bob"},
                             {"password", "secret-5"}, {"sslmode", "disable"}};
  auto conn = Connect(params, ConnectOptions{});
  ASSERT_FALSE(conn);
  EXPECT_EQ(conn.error().database, "posts");
  EXPECT_EQ(conn.error().user, "bob");
  const std::string expected = "connection to server at \"127.0.0.1\", port " +
                               std::to_string(nobody.port()) + " failed: Connection refused";
  EXPECT_EQ(conn.error().reason.substr(0, expected.size()), expected);
  EXPECT_EQ(conn.error().reason.find('\n'), std::string::npos);
  const std::string described = conn.error().Describe("cannot open a replication connection");
  EXPECT_EQ(
      described.substr(0, 80),
      ("cannot open a replication connection to database \"posts\" as user \"bob\": " + expected)
          .substr(0, 80));
  EXPECT_EQ(described.find("secret"), std::string::npos);
}

TEST(Connect, GivesUpOnAServerThatNeverAnswers) {
  testing::TestPort silent;
  silent.Listen();  // accepts, never answers
  ConnectOptions options;
  options.timeout = std::chrono::milliseconds(200);
  auto conn = Connect({{"host", "127.0.0.1"},
                       {"port", std::to_string(silent.port())},
                       {"dbname", "posts"},
                       {"user", "bob"},
                       {"sslmode", "disable"}},
                      options);
  ASSERT_FALSE(conn);
  EXPECT_EQ(conn.error().reason, "no connection within 200 ms");
  EXPECT_EQ(conn.error().Describe("cannot connect"),
            "cannot connect to database \"posts\" as user \"bob\": no connection within 200 ms");
}

TEST(Connect, CallsARefusedOrSilentServerTransient) {
  testing::TestPort nobody;
  auto refused = Connect({{"host", "127.0.0.1"},
                          {"port", std::to_string(nobody.port())},
                          {"dbname", "posts"},
                          {"sslmode", "disable"}},
                         ConnectOptions{});
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().transient);
  EXPECT_EQ(refused.error().ToError("cannot connect").code, ErrorCode::kUnavailable);

  testing::TestPort silent;
  silent.Listen();
  ConnectOptions options;
  options.timeout = std::chrono::milliseconds(100);
  auto timed_out = Connect(
      {{"host", "127.0.0.1"}, {"port", std::to_string(silent.port())}, {"sslmode", "disable"}},
      options);
  ASSERT_FALSE(timed_out);
  EXPECT_TRUE(timed_out.error().transient);
}

TEST(TransientSqlState, OnlyTheClassesThatPassWithTime) {
  for (const char* state : {"08006", "40001", "40P01", "53300", "57P01", "57P03", "58030"})
    EXPECT_TRUE(TransientSqlState(state)) << state;
  for (const char* state :
       {"28P01", "28000", "3D000", "42501", "42P01", "55000", "XX000", "", "0800", "080060"})
    EXPECT_FALSE(TransientSqlState(state)) << state;
}

TEST(ReadConnectFailure, ReadsTheSqlStateAndDropsItFromTheMessage) {
  // The server starting up or shutting down: transient, the message as libpq's default.
  ConnectFailure starting = ReadConnectFailure(
      "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  57P03: the database "
      "system is shutting down\nLOCATION:  ProcessStartupPacket, postmaster.c:2344\n");
  EXPECT_TRUE(starting.transient);
  EXPECT_EQ(starting.reason,
            "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  the database system "
            "is shutting down");

  // Authentication: fixed by the user, never by waiting.
  ConnectFailure password = ReadConnectFailure(
      "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  28P01: password "
      "authentication failed for user \"alice\"\nLOCATION:  auth_failed, auth.c:326\n");
  EXPECT_FALSE(password.transient);
  EXPECT_EQ(password.reason,
            "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  password "
            "authentication failed for user \"alice\"");
  EXPECT_EQ(password.ToError("cannot connect").code, ErrorCode::kInvalidArgument);

  // libpq's own texts: refused, no socket file, a name that resolves nowhere (yet).
  EXPECT_TRUE(ReadConnectFailure("connection to server at \"127.0.0.1\", port 1 failed: "
                                 "Connection refused\n\tIs the server running on that host and "
                                 "accepting TCP/IP connections?\n")
                  .transient);
  EXPECT_TRUE(ReadConnectFailure("connection to server on socket \"/tmp/.s.PGSQL.5432\" failed: "
                                 "No such file or directory\n")
                  .transient);
  EXPECT_TRUE(ReadConnectFailure("could not translate host name \"db\" to address: Temporary "
                                 "failure in name resolution\n")
                  .transient);
  EXPECT_FALSE(ReadConnectFailure("could not translate host name \"nosuch\" to address: Name or "
                                  "service not known\n")
                   .transient);
  // Several hosts: transient when any attempt was.
  EXPECT_TRUE(ReadConnectFailure("connection to server at \"a\" (10.0.0.1), port 5432 failed: "
                                 "FATAL:  28000: no pg_hba.conf entry\nconnection to server at "
                                 "\"b\" (10.0.0.2), port 5432 failed: Connection refused\n")
                  .transient);
}

TEST(Exec, RefusesWithoutAConnection) {
  auto r = Exec(nullptr, "SELECT 1", {}, Deadline::Never(), "counting");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(r.error().message, "counting: not connected");
}

TEST(Deadline, BoundsWaits) {
  const Deadline never = Deadline::Never();
  EXPECT_FALSE(never.bounded());
  EXPECT_FALSE(never.passed());
  EXPECT_EQ(never.Left(std::chrono::milliseconds(1000)), std::chrono::milliseconds(1000));
  const Deadline now = Deadline::In(std::chrono::milliseconds(0));
  EXPECT_TRUE(now.bounded());
  EXPECT_TRUE(now.passed());
  EXPECT_EQ(now.Left(std::chrono::milliseconds(1000)), std::chrono::milliseconds(0));
  const Deadline later = Deadline::In(std::chrono::hours(1));
  EXPECT_FALSE(later.passed());
  EXPECT_EQ(later.Left(std::chrono::milliseconds(1000)), std::chrono::milliseconds(1000));
  EXPECT_EQ(later.limit(), std::chrono::hours(1));
}

// A one-column result built by hand, its values as given (nullptr for NULL).
PgResult OneColumn(const char* name, std::initializer_list<const char*> values) {
  PgResult result(PQmakeEmptyPGresult(nullptr, PGRES_TUPLES_OK));
  PGresAttDesc column{};
  column.name = const_cast<char*>(name);
  column.format = 0;
  column.typid = 25;  // text
  column.typlen = -1;
  column.atttypmod = -1;
  PQsetResultAttrs(result.get(), 1, &column);
  int row = 0;
  for (const char* value : values) {
    PQsetvalue(result.get(), row++, 0, const_cast<char*>(value),
               value == nullptr ? -1 : static_cast<int>(std::strlen(value)));
  }
  return result;
}

TEST(Values, ReadTextAndUnsignedIntegers) {
  PgResult r = OneColumn("count", {"42", nullptr, "4294967295", "4294967296", "-1", "12a", ""});
  EXPECT_EQ(Text(r.get(), 0, 0), "42");
  EXPECT_EQ(Text(r.get(), 1, 0), "");
  EXPECT_EQ(UnsignedValue(r.get(), 0, 0).value(), 42u);
  EXPECT_EQ(UnsignedValue(r.get(), 2, 0, UINT32_MAX).value(), 4294967295u);
  EXPECT_EQ(UnsignedValue(r.get(), 3, 0).value(), 4294967296u);

  auto too_large = UnsignedValue(r.get(), 3, 0, UINT32_MAX);
  ASSERT_FALSE(too_large);
  EXPECT_EQ(too_large.error().code, ErrorCode::kCorruption);
  EXPECT_EQ(too_large.error().message,
            "column count: '4294967296' is not an integer from 0 to 4294967295");
  for (int row : {1, 4, 5, 6}) {
    auto refused = UnsignedValue(r.get(), row, 0);
    ASSERT_FALSE(refused) << row;
    EXPECT_EQ(refused.error().message,
              "column count: '" + Text(r.get(), row, 0) + "' is not an unsigned integer");
  }
}

}  // namespace
}  // namespace tally::postgres
