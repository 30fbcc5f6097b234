// libFuzzer target for WebSocket subscriptions (GET /v1/subscribe): a real SubscriptionStream
// on one end of a loopback TCP connection, the fuzzer's client on the other. The input gives
// the upgrade request's Origin header (or none) and then the client's bytes: raw, or (in the
// structure-aware mode) frames built from a header byte and a payload each, masked or not,
// fragmented or not, of any opcode — so that subscribe and unsubscribe messages, pings and
// close frames reach the stream's message handling as well as Beast's frame parser. The
// hub holds a few counters; its updates are flushed to the stream between events.
// Properties: the stream closes once its client has sent everything and shut down its side
// (its on_closed runs once), and leaves no subscriber behind in the hub.
#include <fuzzer/FuzzedDataProvider.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/field.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine/keyspace.h"
#include "engine/subscriptions.h"
#include "fuzz_check.h"
#include "servers/http/subscription_stream.h"

namespace tally::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;
using fuzz::Check;

// The largest payload of one built frame: past the stream's 64 KiB message limit when
// fragments add up, not much more.
constexpr size_t kMaxPayload = 70000;

// The event loop, a listening socket, and a hub over a keyspace of a few counters.
struct World {
  asio::io_context io;
  tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::address_v4::loopback(), 0)};
  ManualClock clock{1714608000000};
  engine::Keyspace keyspace{&clock};
  engine::SubscriptionHub hub{&keyspace, Options()};

  World() {
    for (const char* key : {"likes:1", "likes:2", "likes:\xff", "blog_posts:7:3"}) {
      keyspace.LoadPut(key, engine::CounterRecord{.value = 42});
    }
    hub.SetDurableEpoch(UINT64_MAX);
  }

  static engine::SubscriptionOptions Options() {
    engine::SubscriptionOptions options;
    options.max_subscriptions = 8;
    options.max_pending = 16;
    options.max_queued_bytes = 4096;
    options.allowed_origins = {"https://allowed.example"};
    return options;
  }
};

// Appends one frame as RFC 6455 section 5.2 lays it out; a client masks its frames.
void AppendFrame(uint8_t head, std::string_view payload, std::string* out) {
  const bool fin = (head & 0x10) == 0;
  const bool masked = (head & 0x20) == 0;
  const uint8_t rsv = head & 0x40;
  out->push_back(static_cast<char>((fin ? 0x80 : 0) | rsv | (head & 0x0f)));
  const uint8_t mask_bit = masked ? 0x80 : 0;
  if (payload.size() < 126) {
    out->push_back(static_cast<char>(mask_bit | payload.size()));
  } else if (payload.size() <= 0xffff) {
    out->push_back(static_cast<char>(mask_bit | 126));
    for (int shift = 8; shift >= 0; shift -= 8)
      out->push_back(static_cast<char>(payload.size() >> shift));
  } else {
    out->push_back(static_cast<char>(mask_bit | 127));
    for (int shift = 56; shift >= 0; shift -= 8)
      out->push_back(static_cast<char>(payload.size() >> shift));
  }
  static constexpr char kMask[4] = {0x37, 0x1f, 0x5a, 0x0c};
  if (masked) out->append(kMask, 4);
  for (size_t i = 0; i < payload.size(); ++i) {
    out->push_back(masked ? static_cast<char>(payload[i] ^ kMask[i % 4]) : payload[i]);
  }
}

SubscriptionStream::Request UpgradeRequest(const std::string* origin) {
  SubscriptionStream::Request request{bhttp::verb::get, "/v1/subscribe?key=likes:1", 11};
  request.set(bhttp::field::host, "localhost:6381");
  request.set(bhttp::field::upgrade, "websocket");
  request.set(bhttp::field::connection, "Upgrade");
  request.set(bhttp::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  request.set(bhttp::field::sec_websocket_version, "13");
  if (origin != nullptr) request.set(bhttp::field::origin, *origin);
  return request;
}

void FuzzClient(World& world, FuzzedDataProvider& in) {
  std::string origin;
  const bool with_origin = in.ConsumeBool();
  if (with_origin) origin = in.ConsumeRandomLengthString(64);
  std::string bytes;
  if (in.ConsumeBool()) {
    bytes = in.ConsumeRemainingBytesAsString();
  } else {
    while (in.remaining_bytes() > 0) {
      const auto head = in.ConsumeIntegral<uint8_t>();
      AppendFrame(head, in.ConsumeRandomLengthString(kMaxPayload), &bytes);
    }
  }

  tcp::socket client(world.io);
  tcp::socket server(world.io);
  client.connect(world.acceptor.local_endpoint());
  world.acceptor.accept(server);
  int closed = 0;
  auto stream =
      std::make_shared<SubscriptionStream>(world.hub, std::move(server), [&closed] { ++closed; });
  SubscriptionRequest subscription{.websocket = true, .keys = {"likes:1"}, .prefixes = {"blog_"}};
  stream->Start(UpgradeRequest(with_origin ? &origin : nullptr), subscription);

  // The client reads and drops whatever the stream sends, so that the stream never waits
  // for room in the socket.
  std::vector<char> discard(64 * 1024);
  std::function<void(const boost::system::error_code&, size_t)> on_read;
  on_read = [&](const boost::system::error_code& error, size_t) {
    if (!error) client.async_read_some(asio::buffer(discard), on_read);
  };
  client.async_read_some(asio::buffer(discard), on_read);
  bool written = false;
  asio::async_write(client, asio::buffer(bytes),
                    [&](const boost::system::error_code&, size_t) { written = true; });

  // First until the stream has done all it can with the bytes (nothing is ready to run),
  // so that its answers are written; then the client shuts down its side, and the stream
  // must close. run_one() returns 0 only once nothing is left to wait for, and a stream
  // that is still open must be waiting for something.
  world.io.restart();
  while (closed == 0) {
    world.hub.Flush();
    if (written) {
      if (world.io.poll() == 0) break;
    } else if (world.io.run_one() == 0) {
      break;
    }
  }
  boost::system::error_code ignored;
  client.shutdown(tcp::socket::shutdown_send, ignored);
  world.io.restart();
  while (closed == 0) {
    world.hub.Flush();
    if (world.io.run_one() == 0) break;
  }
  client.close(ignored);
  world.io.restart();
  world.io.poll();
  Check(closed == 1, "a stream closes once");
  Check(world.hub.subscriber_count() == 0, "a closed stream leaves no subscriber");
  stream.reset();
  world.io.restart();
  world.io.poll();
}

}  // namespace
}  // namespace tally::http

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tally::http::World world;
  FuzzedDataProvider in(data, size);
  tally::http::FuzzClient(world, in);
  return 0;
}
