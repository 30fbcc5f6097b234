// A small C++ layer over nats.c (libnats 3.4.1): RAII owners of its handles, errors as
// values, and the few JetStream calls the cluster needs — ensure a stream, read its state,
// publish with a hand-written expected sequence, publish asynchronously, get one message,
// follow a stream in order.
//
// Facts this layer is built on (checked against nats-server 2.9.10 and nats.c 3.4.1 by
// nats_client_test.cc):
// - nats.c's jsPubOptions.ExpectLastSeq = 0 means "not set" and sends no header, so
//   "expect an empty stream" could not be said with it: Publication writes the
//   Nats-Expected-Last-Sequence header itself, 0 included, and never uses that option.
// - An asynchronous publish without a MaxWait never hears back when its answer is lost:
//   every publish here takes a max_wait_ms, and it must be positive.
// - During a stream leader election nats.c reports NATS_NO_RESPONDERS with the JetStream
//   code 10076 ("JetStream not enabled"): it means "no leader now", not a configuration
//   problem, and the message was certainly not stored.
// - nats.c 3.4.1's read loop takes a message's subscription from the connection's table,
//   lets go of the table's lock and only then locks the subscription (fixed upstream in
//   3.6.0, nats.c#638): a natsSubscription_Destroy in between frees it under the read loop,
//   which then crashes the process. Subscriptions here are never destroyed directly: their
//   handles hand them to NatsConnection::Retire.
//
// Threads: every class is safe to use from several threads unless it says otherwise.
// Destroy publishers and consumers before the connection they were made from.
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster_options.h"
#include "core/status.h"

namespace tally::cluster {

// A failed NATS call, as nats.c reported it.
struct NatsError {
  natsStatus status = NATS_ERR;  // NATS_TIMEOUT, NATS_NO_RESPONDERS, NATS_ERR (a JetStream
                                 // error answer, see js_code), NATS_CONNECTION_CLOSED ...
  int js_code = 0;               // JetStream's error code when the server sent one, else 0
  std::string message;

  // The same failure in tally's vocabulary (core/status.h), for the layers above.
  Error ToError() const;
};

template <typename T>
using NatsResult = tl::expected<T, NatsError>;
using NatsStatus = NatsResult<void>;

// What a failed publish means for the message (the cluster's outcome table, partition_log.h).
enum class PublishFailure {
  kWrongLast,     // JetStream 10071 or 10070: not stored, the stream's last sequence or
                  // last Msg-Id was not the one expected
  kTimeout,       // no answer within MaxWait: unknown, it may still be stored later
  kNoResponders,  // nobody took it (no stream leader now): not stored
  kOther,         // any other answer (503, limits, ...): not stored
};
PublishFailure ClassifyPublishFailure(const NatsError& error);

// RAII owners of nats.c's handles.
template <typename T, void (*Destroy)(T*)>
struct NatsDeleter {
  void operator()(T* handle) const { Destroy(handle); }
};
using MsgHandle = std::unique_ptr<natsMsg, NatsDeleter<natsMsg, natsMsg_Destroy>>;
using PubAckHandle = std::unique_ptr<jsPubAck, NatsDeleter<jsPubAck, jsPubAck_Destroy>>;
using StreamInfoHandle =
    std::unique_ptr<jsStreamInfo, NatsDeleter<jsStreamInfo, jsStreamInfo_Destroy>>;
using JsHandle = std::unique_ptr<jsCtx, NatsDeleter<jsCtx, jsCtx_Destroy>>;

class NatsConnection;
// Ends a subscription through its connection's Retire (see the facts above).
struct SubscriptionRetirer {
  NatsConnection* connection = nullptr;
  void operator()(natsSubscription* subscription) const;
};
using SubscriptionHandle = std::unique_ptr<natsSubscription, SubscriptionRetirer>;

// How to reach the NATS servers and how to behave when they go away.
struct ConnectOptions {
  std::vector<std::string> servers;       // e.g. nats://127.0.0.1:4222; at least one
  std::string name = "tally";             // the client name servers show
  int connect_timeout_ms = 1000;          // per server and attempt
  int reconnect_wait_ms = 100;            // between two attempts on one server; reconnects forever
  int ping_interval_ms = 1000;            // a dead server is noticed after about
  int max_pings_out = 2;                  //   ping_interval_ms * max_pings_out
  int reconnect_buffer_bytes = 64 << 20;  // publishes buffered while reconnecting
  int64_t request_timeout_ms = 5000;      // each JetStream API call (stream info, add ...)
  // true: a publish is written to the socket by the thread that publishes, at once (nats.c's
  // SendAsap). false, nats.c's default: its flusher thread writes it, after waiting up to
  // 1 ms for more (nats.c 3.4.1, conn.c _flusher) — a wait on the path of every record of a
  // partition, whose acknowledgements it delays. `taskset -c 1 build/bin/cluster_log_bench
  // 1 1 0 4 [buffered]` (one record in flight): 2,857-3,008 records/s with it, 946-953 without
  // (docs/benchmarks.md, "The acknowledgement path").
  bool send_asap = true;
  // true: the servers are tried in the order given (nats.c's NoRandomize), so a connection
  // stays on the first while it is up. false: in a random order, spreading clients.
  bool no_randomize = false;
  // When any field is set, every connection is TLS (1.2 or later, nats.c's default), each
  // server's certificate checked against tls.ca_cert_file's CAs (the system's when empty)
  // and, when tls.server_name is set, that name (nats.c 3.4 checks no name otherwise).
  // tls.cert_file and key_file are presented to servers that ask for a client certificate.
  NatsTlsOptions tls;
  // Called on a nats.c thread, one at a time, never after the connection is destroyed.
  std::function<void()> on_disconnected;
  std::function<void(const std::string& url)> on_reconnected;
  std::function<void(const std::string& text)> on_error;  // asynchronous errors
};

// The host and port a NATS URL names: [scheme://][user[:password]@]host[:port][/...], an
// IPv6 host in brackets (returned without them); port is empty when the URL gives none.
// The views point into `url`: keep it alive while they are used.
struct NatsUrlAddress {
  std::string_view host;
  std::string_view port;
};
NatsUrlAddress ParseNatsUrl(std::string_view url);

// A stream's configuration as tally creates it: limits retention (trimmed only by explicit
// purges), refusal rather than silent loss when full, file storage by default.
struct StreamConfig {
  std::string name;
  std::vector<std::string> subjects;
  int replicas = 3;  // R3: an R2 stream stops with one server down
  bool memory_storage = false;
  int64_t duplicate_window_ms = 120000;  // Nats-Msg-Id de-duplication window
  int32_t max_message_bytes = 1 << 20;
  bool allow_direct = true;  // direct gets from any replica
  bool deny_delete = true;   // no single-message deletes (purges stay allowed)
};

// A stream's state as its leader reported it.
struct StreamState {
  uint64_t first_seq = 0;  // after a purge, the first sequence still held
  uint64_t last_seq = 0;   // 0 for a stream that never had a message; kept by purges
  uint64_t messages = 0;
  std::string leader;  // the leading server's name; empty while there is none
  // A replicated stream without a leader now: the answer came from one replica's own state,
  // which may be behind the others'.
  bool leaderless = false;
};

// A stream's answer to a stored (or de-duplicated) publish.
struct PubAck {
  std::string stream;
  uint64_t seq = 0;
  bool duplicate = false;  // the Nats-Msg-Id was stored before, at `seq`
};

// One message read back from a stream.
struct StoredMessage {
  uint64_t seq = 0;
  std::string subject;
  std::string msg_id;  // its Nats-Msg-Id header; empty when it had none
  std::string data;
  int64_t time_ns = 0;  // when the stream took it (Unix ns)
};

// A header beyond the two that Publication names.
struct MessageHeader {
  std::string_view name;
  std::string_view value;
};

// One message to publish to JetStream.
struct Publication {
  std::string_view subject;
  std::string_view data;
  std::string_view msg_id;                    // Nats-Msg-Id; empty = none
  std::optional<uint64_t> expected_last_seq;  // Nats-Expected-Last-Sequence, 0 included
  std::span<const MessageHeader> headers;
};

// One connection to a NATS cluster, reconnecting forever, with the synchronous JetStream
// calls.
class NatsConnection {
 public:
  // Connects to one of options.servers; fails when none answers.
  static NatsResult<std::unique_ptr<NatsConnection>> Connect(ConnectOptions options);

  // Closes the connection, then destroys the subscriptions still waiting to be retired and
  // the contexts kept; waits (at most 5 s) until nats.c has made its last callback.
  ~NatsConnection();
  NatsConnection(const NatsConnection&) = delete;
  NatsConnection& operator=(const NatsConnection&) = delete;

  natsConnection* handle() const { return connection_; }
  const ConnectOptions& options() const;
  bool connected() const;
  std::string connected_url() const;
  uint64_t reconnects() const;

  // Creates the stream, or finds it with exactly this configuration (creating twice with
  // the same configuration succeeds). A stream of that name with another configuration is
  // refused (js_code 10058), and left as it is.
  NatsResult<StreamState> EnsureStream(const StreamConfig& config);
  NatsResult<StreamState> GetStreamState(const std::string& stream);
  // Removes the messages below `below_seq` (the last sequence stays); with a `subject`
  // (wildcards allowed), only those on it. below_seq <= 1 removes nothing.
  NatsStatus PurgeStream(const std::string& stream, uint64_t below_seq,
                         const std::string& subject = "");
  NatsStatus DeleteStream(const std::string& stream);

  // Publishes and waits for the stream's answer, at most max_wait_ms (> 0).
  NatsResult<PubAck> Publish(const Publication& publication, int64_t max_wait_ms);

  // The message at `seq`, read through the stream's leader (so not from a lagging
  // replica); nullopt when the stream holds none there.
  NatsResult<std::optional<StoredMessage>> GetMessage(const std::string& stream, uint64_t seq);
  // The stream's last message on `subject`, the same way; nullopt when it holds none.
  NatsResult<std::optional<StoredMessage>> GetLastMessage(const std::string& stream,
                                                          const std::string& subject);

  // Publishes a plain NATS message (no JetStream: no answer, at most once; buffered while
  // reconnecting).
  NatsStatus PublishPlain(const std::string& subject, std::string_view data);

  // Takes over a subscription made on this connection and ends it on the connection's
  // retiring thread: unsubscribed first (no message read later finds it; a JetStream
  // consumer nats.c made is deleted, a request that may wait), then destroyed once a flush
  // came back, since the read loop handles the flush's PONG only after any message it was
  // delivering. Any thread; returns at once.
  void Retire(natsSubscription* subscription);
  // Holds a JetStream context until the connection closes, when destroying it could race
  // with its reply subscription's messages (see the facts above). Any thread.
  void KeepUntilClosed(JsHandle context);
  // How many contexts KeepUntilClosed holds now.
  size_t contexts_kept() const;

 private:
  struct Callbacks;
  struct Retiring;
  NatsConnection(natsConnection* connection, std::unique_ptr<Callbacks> callbacks);
  void RetireLoop();

  natsConnection* const connection_;
  std::unique_ptr<Callbacks> callbacks_;
  std::unique_ptr<Retiring> retiring_;
  JsHandle js_;  // for the synchronous calls
};

// Publishes asynchronously on its own JetStream context: up to any number of publishes
// outstanding, each answered exactly once through the callback.
class AsyncPublisher {
 public:
  // `tag` is the caller's name for one Publish call.
  using Callback = std::function<void(uint64_t tag, NatsResult<PubAck> outcome)>;

  // `on_outcome` is called on a nats.c thread, one call at a time, with no lock of this
  // class held; it may call Publish.
  static NatsResult<std::unique_ptr<AsyncPublisher>> Create(NatsConnection& connection,
                                                            Callback on_outcome);

  // Waits until every outstanding publish has had its outcome (bounded by the longest
  // max_wait_ms used, plus 2 s); outcomes that come later are dropped.
  ~AsyncPublisher();
  AsyncPublisher(const AsyncPublisher&) = delete;
  AsyncPublisher& operator=(const AsyncPublisher&) = delete;

  // Sends the message. On success its outcome will come through the callback — a PubAck,
  // or an error that ClassifyPublishFailure reads; NATS_TIMEOUT after max_wait_ms (> 0)
  // at the latest. On failure it was not sent and no outcome will come.
  NatsStatus Publish(uint64_t tag, const Publication& publication, int64_t max_wait_ms);

  // Publishes sent whose outcome has not come yet.
  size_t outstanding() const;

 private:
  struct State;
  AsyncPublisher(NatsConnection& connection, JsHandle js, State* state);
  static void OnAck(jsCtx* js, natsMsg* msg, jsPubAck* ack, jsPubAckErr* error, void* closure);

  NatsConnection& connection_;
  JsHandle js_;
  State* state_;  // owned; leaked on purpose when nats.c might still call back
};

// Follows one stream in order from a start sequence: an ordered push consumer (nats.c
// recreates it from the last delivered sequence after a gap, a missed heartbeat or a
// reconnect). Not thread-safe: one reader.
class OrderedConsumer {
 public:
  // Delivers the messages of `stream` on `subject` from `start_seq` (>= 1) on. A purged
  // start is skipped silently by JetStream: compare the sequences delivered.
  static NatsResult<std::unique_ptr<OrderedConsumer>> Start(NatsConnection& connection,
                                                            const std::string& stream,
                                                            const std::string& subject,
                                                            uint64_t start_seq,
                                                            int64_t heartbeat_ms = 1000);

  // The next message; nullopt when none arrived within wait_ms.
  NatsResult<std::optional<StoredMessage>> Next(int64_t wait_ms);

 private:
  OrderedConsumer(JsHandle js, SubscriptionHandle subscription)
      : js_(std::move(js)), subscription_(std::move(subscription)) {}

  JsHandle js_;
  SubscriptionHandle subscription_;  // destroyed before js_
};

// Receives the plain NATS messages of one subject (no JetStream), each at most once, in the
// order they arrived. Not thread-safe: one reader.
class PlainSubscriber {
 public:
  static NatsResult<std::unique_ptr<PlainSubscriber>> Start(NatsConnection& connection,
                                                            const std::string& subject);

  // The next message's data; nullopt when none arrived within wait_ms.
  NatsResult<std::optional<std::string>> Next(int64_t wait_ms);

 private:
  explicit PlainSubscriber(SubscriptionHandle subscription)
      : subscription_(std::move(subscription)) {}

  SubscriptionHandle subscription_;
};

}  // namespace tally::cluster
