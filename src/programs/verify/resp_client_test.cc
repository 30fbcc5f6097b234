// The RESP client against a fake tallyd on a local socket: what it sends, how it reads each
// kind of reply, and how it fails.
#include "programs/verify/resp_client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "core/test_port.h"

namespace tally::verify {
namespace {

using std::chrono::milliseconds;

// Accepts one connection, reads `request.size()` bytes into received(), writes `reply`,
// then closes.
class FakeServer {
 public:
  FakeServer(std::string request, std::string reply)
      : expected_size_(request.size()), reply_(std::move(reply)) {
    port_.Listen();
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeServer() {
    if (thread_.joinable()) thread_.join();
  }

  std::string address() const { return port_.address(); }

  // A client connected to this server.
  void Connect(RespClient& client) const {
    auto connected = client.Connect(address(), {}, milliseconds(2000), milliseconds(2000));
    ASSERT_TRUE(connected) << connected.error().message;
  }
  // What the client sent; call after the client is done.
  const std::string& received() {
    if (thread_.joinable()) thread_.join();
    return received_;
  }

 private:
  void Serve() {
    const int client = accept(port_.fd(), nullptr, nullptr);
    if (client < 0) return;
    char buffer[4096];
    while (received_.size() < expected_size_) {
      const ssize_t n = recv(client, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      received_.append(buffer, static_cast<size_t>(n));
    }
    send(client, reply_.data(), reply_.size(), MSG_NOSIGNAL);
    close(client);
  }

  size_t expected_size_;
  std::string reply_;
  std::string received_;
  testing::TestPort port_;
  std::thread thread_;
};

TEST(RespClient, SendsCommandsAndReadsEveryKindOfReply) {
  const std::string request =
      "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
      "*1\r\n$12\r\nCOUNTER.HOLD\r\n"
      "*1\r\n$4\r\nINFO\r\n"
      "*1\r\n$4\r\nPING\r\n";
  FakeServer server(request,
                    "$-1\r\n"
                    "*3\r\n:1\r\n$5\r\n0/1A0\r\n_\r\n"
                    "%1\r\n+state\r\n$8\r\ncounting\r\n"
                    "-ERR nope\r\n");
  RespClient client;
  server.Connect(client);
  auto replies = client.Pipeline({{"GET", "k"}, {"COUNTER.HOLD"}, {"INFO"}, {"PING"}});
  ASSERT_TRUE(replies) << replies.error().message;
  ASSERT_EQ(replies->size(), 4u);

  EXPECT_EQ((*replies)[0].kind, Reply::Kind::kNil);

  const Reply& hold = (*replies)[1];
  ASSERT_EQ(hold.kind, Reply::Kind::kArray);
  ASSERT_EQ(hold.items.size(), 3u);
  EXPECT_EQ(hold.items[0].AsInteger(), 1);
  EXPECT_EQ(hold.items[1].text, "0/1A0");
  EXPECT_EQ(hold.items[1].AsInteger(), std::nullopt);
  EXPECT_EQ(hold.items[2].kind, Reply::Kind::kNil);
  EXPECT_EQ(hold.Describe(), "an array of 3");

  const Reply& map = (*replies)[2];  // flattened: key, value
  ASSERT_EQ(map.items.size(), 2u);
  EXPECT_EQ(map.items[0].text, "state");
  EXPECT_EQ(map.items[1].Describe(), "\"counting\"");

  EXPECT_TRUE((*replies)[3].is_error());
  EXPECT_EQ((*replies)[3].Describe(), "error ERR nope");
  EXPECT_EQ(server.received(), request);
}

TEST(RespClient, CheckTurnsAnErrorReplyIntoAnError) {
  FakeServer server("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "-ERR wrong type\r\n");
  RespClient client;
  server.Connect(client);
  auto reply = client.Check({"GET", "k"});
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().message, "tallyd: GET: ERR wrong type");
}

TEST(RespClient, ALostConnectionIsAnError) {
  FakeServer server("*1\r\n$4\r\nTIME\r\n", "*2\r\n$10\r\n17");  // cut in the middle
  RespClient client;
  server.Connect(client);
  auto reply = client.Call({"TIME"});
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().message,
            "connection to tallyd at " + server.address() + " lost: closed by the server");
  // Closed since: the next call fails at once.
  auto again = client.Call({"TIME"});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().message,
            "connection to tallyd at " + server.address() + " lost: not connected");
}

TEST(RespClient, AReplyThatDoesNotParseIsAnError) {
  FakeServer server("*1\r\n$4\r\nTIME\r\n", ":12x\r\n");
  RespClient client;
  server.Connect(client);
  auto reply = client.Call({"TIME"});
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().message,
            "connection to tallyd at " + server.address() + " lost: bad reply ':12x'");
}

TEST(RespClient, AuthenticatesWithAPassword) {
  FakeServer server("*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n", "-WRONGPASS invalid password\r\n");
  RespClient client;
  auto connected =
      client.Connect(server.address(), {"", "pw"}, milliseconds(2000), milliseconds(2000));
  ASSERT_FALSE(connected);
  EXPECT_EQ(connected.error().message,
            "tallyd at " + server.address() + ": AUTH: WRONGPASS invalid password");
}

TEST(RespClient, AuthenticatesAsAUser) {
  FakeServer server("*3\r\n$4\r\nAUTH\r\n$5\r\nalice\r\n$2\r\npw\r\n",
                    "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  RespClient client;
  auto connected =
      client.Connect(server.address(), {"alice", "pw"}, milliseconds(2000), milliseconds(2000));
  ASSERT_FALSE(connected);
  EXPECT_EQ(connected.error().message,
            "tallyd at " + server.address() +
                ": AUTH: WRONGPASS invalid username-password pair or user is disabled.");
}

TEST(RespClient, RefusesABadAddressAndAClosedPort) {
  RespClient client;
  auto bad = client.Connect("localhost", {}, milliseconds(2000), milliseconds(2000));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "--server 'localhost' must be host:port");

  const testing::TestPort nobody;  // never listens: refuses
  auto refused = client.Connect(nobody.address(), {}, milliseconds(2000), milliseconds(2000));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "cannot connect to tallyd at " + nobody.address() + ": Connection refused");
}

TEST(Reply, ReadsIntegersFromStrings) {
  Reply bulk{Reply::Kind::kBulk, "-42", 0, {}};
  EXPECT_EQ(bulk.AsInteger(), -42);
  bulk.text = "";
  EXPECT_EQ(bulk.AsInteger(), std::nullopt);
  bulk.text = "12 ";
  EXPECT_EQ(bulk.AsInteger(), std::nullopt);
  const Reply integer{Reply::Kind::kInteger, "", 7, {}};
  EXPECT_EQ(integer.AsInteger(), 7);
  const Reply error{Reply::Kind::kError, "5", 0, {}};
  EXPECT_EQ(error.AsInteger(), std::nullopt);
}

}  // namespace
}  // namespace tally::verify
