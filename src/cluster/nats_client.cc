#include "cluster/nats_client.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/thread_name.h"

namespace tally::cluster {
namespace {

constexpr int64_t kNanosPerMilli = 1000 * 1000;
constexpr jsErrCode kNoJsError = static_cast<jsErrCode>(0);

// The failure nats.c just reported on this thread.
NatsError LastError(natsStatus status, jsErrCode js_code = kNoJsError) {
  const char* text = nats_GetLastError(nullptr);
  NatsError error{status, static_cast<int>(js_code), {}};
  error.message = (text != nullptr && *text != '\0') ? text : natsStatus_GetText(status);
  return error;
}

tl::unexpected<NatsError> Fail(natsStatus status, jsErrCode js_code = kNoJsError) {
  return tl::unexpected<NatsError>(LastError(status, js_code));
}

StreamState ToState(const jsStreamInfo& info) {
  StreamState state;
  state.first_seq = info.State.FirstSeq;
  state.last_seq = info.State.LastSeq;
  state.messages = info.State.Msgs;
  if (info.Cluster != nullptr && info.Cluster->Leader != nullptr) {
    state.leader = info.Cluster->Leader;
  }
  state.leaderless = info.Cluster != nullptr && state.leader.empty();
  return state;
}

std::string HeaderValue(natsMsg* msg, const char* name) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, name, &value) != NATS_OK || value == nullptr) return {};
  return value;
}

// A natsMsg holding the publication, its headers written by hand (see nats_client.h).
NatsResult<MsgHandle> BuildMessage(const Publication& publication) {
  const std::string subject(publication.subject);
  natsMsg* raw = nullptr;
  natsStatus status = natsMsg_Create(&raw, subject.c_str(), nullptr, publication.data.data(),
                                     static_cast<int>(publication.data.size()));
  if (status != NATS_OK) return Fail(status);
  MsgHandle msg(raw);
  if (!publication.msg_id.empty()) {
    status = natsMsgHeader_Set(msg.get(), "Nats-Msg-Id", std::string(publication.msg_id).c_str());
  }
  if (status == NATS_OK && publication.expected_last_seq.has_value()) {
    status = natsMsgHeader_Set(msg.get(), "Nats-Expected-Last-Sequence",
                               std::to_string(*publication.expected_last_seq).c_str());
  }
  for (const MessageHeader& header : publication.headers) {
    if (status != NATS_OK) break;
    status = natsMsgHeader_Set(msg.get(), std::string(header.name).c_str(),
                               std::string(header.value).c_str());
  }
  if (status != NATS_OK) return Fail(status);
  return msg;
}

// ConnectOptions' TLS settings on nats.c's options (its SSL context is made by the first).
natsStatus SetTls(natsOptions* options, const NatsTlsOptions& tls) {
  natsStatus status = natsOptions_SetSecure(options, true);
  if (status == NATS_OK && !tls.ca_cert_file.empty()) {
    status = natsOptions_LoadCATrustedCertificates(options, tls.ca_cert_file.c_str());
  }
  if (status == NATS_OK && !tls.cert_file.empty()) {
    status =
        natsOptions_LoadCertificatesChain(options, tls.cert_file.c_str(), tls.key_file.c_str());
  }
  if (status == NATS_OK && !tls.server_name.empty()) {
    status = natsOptions_SetExpectedHostname(options, tls.server_name.c_str());
  }
  return status;
}

PubAck ToPubAck(const jsPubAck& ack) {
  return PubAck{ack.Stream != nullptr ? ack.Stream : "", ack.Sequence, ack.Duplicate};
}

NatsResult<JsHandle> NewContext(natsConnection* connection, const jsOptions& options) {
  jsCtx* js = nullptr;
  jsOptions copy = options;
  const natsStatus status = natsConnection_JetStream(&js, connection, &copy);
  if (status != NATS_OK) return Fail(status);
  return JsHandle(js);
}

}  // namespace

Error NatsError::ToError() const {
  std::string text = "NATS: " + message;
  if (js_code != 0) text += " (JetStream error " + std::to_string(js_code) + ")";
  switch (status) {
    case NATS_TIMEOUT:
    case NATS_NO_RESPONDERS:
    case NATS_NO_SERVER:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NOT_YET_CONNECTED:
      return Error{ErrorCode::kUnavailable, std::move(text)};
    default:
      break;
  }
  switch (js_code) {
    case JSStreamNameExistErr:
      return Error{ErrorCode::kInvalidArgument, std::move(text)};
    case JSStreamNotFoundErr:
    case JSNoMessageFoundErr:
      return Error{ErrorCode::kNotFound, std::move(text)};
    case JSStreamWrongLastSequenceErr:
    case JSStreamWrongLastMsgIDErr:
    case JSClusterNotAvailErr:
      return Error{ErrorCode::kUnavailable, std::move(text)};
    default:
      return Error{ErrorCode::kIOError, std::move(text)};
  }
}

PublishFailure ClassifyPublishFailure(const NatsError& error) {
  if (error.status == NATS_TIMEOUT) return PublishFailure::kTimeout;
  if (error.status == NATS_NO_RESPONDERS) return PublishFailure::kNoResponders;
  if (error.js_code == JSStreamWrongLastSequenceErr || error.js_code == JSStreamWrongLastMsgIDErr) {
    return PublishFailure::kWrongLast;
  }
  return PublishFailure::kOther;
}

// ---------------------------------------------------------------------------------------
// NatsConnection

// What nats.c's connection callbacks reach, kept apart from the connection so that it can
// outlive it if nats.c never reports the close.
struct NatsConnection::Callbacks {
  ConnectOptions options;
  std::mutex mutex;
  std::condition_variable closed_cv;
  bool closed = false;  // guarded by mutex

  static void Disconnected(natsConnection*, void* closure) {
    auto* self = static_cast<Callbacks*>(closure);
    if (self->options.on_disconnected) self->options.on_disconnected();
  }
  static void Reconnected(natsConnection* connection, void* closure) {
    auto* self = static_cast<Callbacks*>(closure);
    char url[256] = "";
    natsConnection_GetConnectedUrl(connection, url, sizeof url);
    if (self->options.on_reconnected) self->options.on_reconnected(url);
  }
  static void Closed(natsConnection*, void* closure) {
    auto* self = static_cast<Callbacks*>(closure);
    std::lock_guard lock(self->mutex);
    self->closed = true;
    self->closed_cv.notify_all();
  }
  static void AsyncError(natsConnection* connection, natsSubscription*, natsStatus status,
                         void* closure) {
    auto* self = static_cast<Callbacks*>(closure);
    const char* last = nullptr;
    natsConnection_GetLastError(connection, &last);
    std::string text = natsStatus_GetText(status);
    if (last != nullptr && *last != '\0') text += std::string(": ") + last;
    if (self->options.on_error) self->options.on_error(text);
  }
};

NatsUrlAddress ParseNatsUrl(std::string_view url) {
  if (const size_t scheme = url.find("://"); scheme != std::string_view::npos) {
    url.remove_prefix(scheme + 3);
  }
  url = url.substr(0, url.find('/'));
  if (const size_t at = url.rfind('@'); at != std::string_view::npos) url.remove_prefix(at + 1);
  NatsUrlAddress address;
  size_t host_end = url.find(':');
  if (url.starts_with('[')) {
    const size_t bracket = url.find(']');
    address.host = url.substr(1, bracket == std::string_view::npos ? bracket : bracket - 1);
    host_end = bracket == std::string_view::npos ? bracket : url.find(':', bracket);
  } else {
    address.host = url.substr(0, host_end);
  }
  if (host_end != std::string_view::npos) address.port = url.substr(host_end + 1);
  return address;
}

NatsResult<std::unique_ptr<NatsConnection>> NatsConnection::Connect(ConnectOptions options) {
  if (options.servers.empty()) {
    return tl::unexpected(NatsError{NATS_INVALID_ARG, 0, "no NATS server given"});
  }
  auto callbacks = std::make_unique<Callbacks>();
  callbacks->options = std::move(options);
  const ConnectOptions& o = callbacks->options;

  natsOptions* raw = nullptr;
  natsStatus status = natsOptions_Create(&raw);
  if (status != NATS_OK) return Fail(status);
  const std::unique_ptr<natsOptions, NatsDeleter<natsOptions, natsOptions_Destroy>> nopts(raw);
  std::vector<const char*> servers;
  for (const std::string& server : o.servers) servers.push_back(server.c_str());
  void* closure = callbacks.get();
  for (const natsStatus step : {
           natsOptions_SetServers(raw, servers.data(), static_cast<int>(servers.size())),
           natsOptions_SetName(raw, o.name.c_str()),
           natsOptions_SetTimeout(raw, o.connect_timeout_ms),
           natsOptions_SetMaxReconnect(raw, -1),
           natsOptions_SetReconnectWait(raw, o.reconnect_wait_ms),
           natsOptions_SetReconnectJitter(raw, o.reconnect_wait_ms / 2, 0),
           natsOptions_SetPingInterval(raw, o.ping_interval_ms),
           natsOptions_SetMaxPingsOut(raw, o.max_pings_out),
           natsOptions_SetReconnectBufSize(raw, o.reconnect_buffer_bytes),
           natsOptions_SetSendAsap(raw, o.send_asap),
           natsOptions_SetNoRandomize(raw, o.no_randomize),
           natsOptions_SetDisconnectedCB(raw, &Callbacks::Disconnected, closure),
           natsOptions_SetReconnectedCB(raw, &Callbacks::Reconnected, closure),
           natsOptions_SetClosedCB(raw, &Callbacks::Closed, closure),
           natsOptions_SetErrorHandler(raw, &Callbacks::AsyncError, closure),
       }) {
    if (step != NATS_OK) return Fail(step);
  }
  if (o.tls.any()) {
    if (status = SetTls(raw, o.tls); status != NATS_OK) return Fail(status);
  }
  natsConnection* connection = nullptr;
  status = natsConnection_Connect(&connection, raw);
  if (status != NATS_OK) return Fail(status);
  // From here on the destructor closes the connection and waits for its last callback.
  std::unique_ptr<NatsConnection> result(new NatsConnection(connection, std::move(callbacks)));

  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.Wait = result->options().request_timeout_ms;
  auto js = NewContext(connection, js_options);
  if (!js) return tl::unexpected(js.error());
  result->js_ = std::move(*js);
  return result;
}

// The subscriptions handed to Retire and the thread that ends them.
struct NatsConnection::Retiring {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<natsSubscription*> waiting;  // guarded by mutex
  bool stopping = false;                   // guarded by mutex
  std::vector<JsHandle> kept;              // guarded by mutex; see KeepUntilClosed
  std::thread thread;
};

void SubscriptionRetirer::operator()(natsSubscription* subscription) const {
  connection->Retire(subscription);
}

NatsConnection::NatsConnection(natsConnection* connection, std::unique_ptr<Callbacks> callbacks)
    : connection_(connection),
      callbacks_(std::move(callbacks)),
      retiring_(std::make_unique<Retiring>()) {
  retiring_->thread = NamedThread("nats-retire", [this] { RetireLoop(); });
}

NatsConnection::~NatsConnection() {
  // Closed first: nats.c joins the read loop, after which ending a subscription races with
  // nothing, and the retiring thread's unsubscribes and flushes fail at once.
  natsConnection_Close(connection_);
  {
    std::lock_guard lock(retiring_->mutex);
    retiring_->stopping = true;
  }
  retiring_->wake.notify_all();
  retiring_->thread.join();
  retiring_->kept.clear();
  bool closed;
  {
    std::unique_lock lock(callbacks_->mutex);
    closed = callbacks_->closed_cv.wait_for(lock, std::chrono::seconds(5),
                                            [this] { return callbacks_->closed; });
  }
  js_.reset();
  natsConnection_Destroy(connection_);
  // nats.c delivers the closed callback last; without it, a late callback may still come.
  if (!closed) (void)callbacks_.release();
}

void NatsConnection::Retire(natsSubscription* subscription) {
  if (subscription == nullptr) return;
  {
    std::lock_guard lock(retiring_->mutex);
    retiring_->waiting.push_back(subscription);
  }
  retiring_->wake.notify_one();
}

void NatsConnection::KeepUntilClosed(JsHandle context) {
  std::lock_guard lock(retiring_->mutex);
  retiring_->kept.push_back(std::move(context));
}

size_t NatsConnection::contexts_kept() const {
  std::lock_guard lock(retiring_->mutex);
  return retiring_->kept.size();
}

void NatsConnection::RetireLoop() {
  // A flush that does not come back (no server now) bounds the wait; the subscriptions are
  // unsubscribed by then, and a read loop without a server delivers nothing.
  constexpr int64_t kFlushTimeoutMs = 2000;
  std::unique_lock lock(retiring_->mutex);
  while (true) {
    retiring_->wake.wait(lock,
                         [this] { return retiring_->stopping || !retiring_->waiting.empty(); });
    if (retiring_->waiting.empty()) return;
    std::vector<natsSubscription*> batch = std::move(retiring_->waiting);
    retiring_->waiting.clear();
    lock.unlock();
    for (natsSubscription* subscription : batch) natsSubscription_Unsubscribe(subscription);
    natsConnection_FlushTimeout(connection_, kFlushTimeoutMs);
    for (natsSubscription* subscription : batch) natsSubscription_Destroy(subscription);
    lock.lock();
  }
}

const ConnectOptions& NatsConnection::options() const { return callbacks_->options; }

bool NatsConnection::connected() const {
  return natsConnection_Status(connection_) == NATS_CONN_STATUS_CONNECTED;
}

std::string NatsConnection::connected_url() const {
  char url[256] = "";
  if (natsConnection_GetConnectedUrl(connection_, url, sizeof url) != NATS_OK) return {};
  return url;
}

uint64_t NatsConnection::reconnects() const {
  natsStatistics* raw = nullptr;
  if (natsStatistics_Create(&raw) != NATS_OK) return 0;
  const std::unique_ptr<natsStatistics, NatsDeleter<natsStatistics, natsStatistics_Destroy>> stats(
      raw);
  uint64_t reconnects = 0;
  if (natsConnection_GetStats(connection_, raw) != NATS_OK ||
      natsStatistics_GetCounts(raw, nullptr, nullptr, nullptr, nullptr, &reconnects) != NATS_OK) {
    return 0;
  }
  return reconnects;
}

NatsResult<StreamState> NatsConnection::EnsureStream(const StreamConfig& config) {
  std::vector<const char*> subjects;
  for (const std::string& subject : config.subjects) subjects.push_back(subject.c_str());
  jsStreamConfig c;
  jsStreamConfig_Init(&c);
  c.Name = config.name.c_str();
  c.Subjects = subjects.data();
  c.SubjectsLen = static_cast<int>(subjects.size());
  c.Retention = js_LimitsPolicy;
  c.Discard = js_DiscardNew;
  c.Storage = config.memory_storage ? js_MemoryStorage : js_FileStorage;
  c.Replicas = config.replicas;
  c.Duplicates = config.duplicate_window_ms * kNanosPerMilli;
  c.MaxMsgSize = config.max_message_bytes;
  c.AllowDirect = config.allow_direct;
  c.DenyDelete = config.deny_delete;
  jsStreamInfo* info = nullptr;
  jsErrCode js_code = kNoJsError;
  const natsStatus status = js_AddStream(&info, js_.get(), &c, nullptr, &js_code);
  if (status != NATS_OK) {
    NatsError error = LastError(status, js_code);
    if (js_code == JSStreamNameExistErr) {
      error.message = "stream " + config.name +
                      " exists with another configuration; it was left as it is (" + error.message +
                      ")";
    }
    return tl::unexpected(std::move(error));
  }
  const StreamInfoHandle owned(info);
  return ToState(*info);
}

NatsResult<StreamState> NatsConnection::GetStreamState(const std::string& stream) {
  jsStreamInfo* info = nullptr;
  jsErrCode js_code = kNoJsError;
  const natsStatus status = js_GetStreamInfo(&info, js_.get(), stream.c_str(), nullptr, &js_code);
  if (status != NATS_OK) return Fail(status, js_code);
  const StreamInfoHandle owned(info);
  return ToState(*info);
}

NatsStatus NatsConnection::PurgeStream(const std::string& stream, uint64_t below_seq,
                                       const std::string& subject) {
  // Nothing lies below 1; and nats-server 2.9.10 takes a filtered purge's sequence 1 as no
  // bound at all (every message on the subject went, in the tests).
  if (below_seq <= 1) return {};
  jsOptions options;
  jsOptions_Init(&options);
  options.Stream.Purge.Sequence = below_seq;  // "up to but not including"
  if (!subject.empty()) options.Stream.Purge.Subject = subject.c_str();
  jsErrCode js_code = kNoJsError;
  const natsStatus status = js_PurgeStream(js_.get(), stream.c_str(), &options, &js_code);
  if (status != NATS_OK) return Fail(status, js_code);
  return {};
}

NatsStatus NatsConnection::DeleteStream(const std::string& stream) {
  jsErrCode js_code = kNoJsError;
  const natsStatus status = js_DeleteStream(js_.get(), stream.c_str(), nullptr, &js_code);
  if (status != NATS_OK) return Fail(status, js_code);
  return {};
}

NatsResult<PubAck> NatsConnection::Publish(const Publication& publication, int64_t max_wait_ms) {
  auto msg = BuildMessage(publication);
  if (!msg) return tl::unexpected(msg.error());
  jsPubOptions options;
  jsPubOptions_Init(&options);
  options.MaxWait = max_wait_ms;
  jsPubAck* raw = nullptr;
  jsErrCode js_code = kNoJsError;
  const natsStatus status = js_PublishMsg(&raw, js_.get(), msg->get(), &options, &js_code);
  if (status != NATS_OK) return Fail(status, js_code);
  const PubAckHandle ack(raw);
  return ToPubAck(*ack);
}

namespace {

// A message got from a stream (js_GetMsg, js_GetLastMsg): nullopt for "no message found".
NatsResult<std::optional<StoredMessage>> StoredOrNone(natsStatus status, natsMsg* raw,
                                                      jsErrCode js_code) {
  if (status != NATS_OK) {
    if (js_code == JSNoMessageFoundErr) return std::optional<StoredMessage>();
    return Fail(status, js_code);
  }
  const MsgHandle msg(raw);
  StoredMessage stored;
  stored.seq = natsMsg_GetSequence(raw);
  stored.subject = natsMsg_GetSubject(raw);
  stored.msg_id = HeaderValue(raw, "Nats-Msg-Id");
  stored.data.assign(natsMsg_GetData(raw), static_cast<size_t>(natsMsg_GetDataLength(raw)));
  stored.time_ns = natsMsg_GetTime(raw);
  return std::optional<StoredMessage>(std::move(stored));
}

}  // namespace

NatsResult<std::optional<StoredMessage>> NatsConnection::GetMessage(const std::string& stream,
                                                                    uint64_t seq) {
  natsMsg* raw = nullptr;
  jsErrCode js_code = kNoJsError;
  const natsStatus status = js_GetMsg(&raw, js_.get(), stream.c_str(), seq, nullptr, &js_code);
  return StoredOrNone(status, raw, js_code);
}

NatsResult<std::optional<StoredMessage>> NatsConnection::GetLastMessage(
    const std::string& stream, const std::string& subject) {
  natsMsg* raw = nullptr;
  jsErrCode js_code = kNoJsError;
  const natsStatus status =
      js_GetLastMsg(&raw, js_.get(), stream.c_str(), subject.c_str(), nullptr, &js_code);
  return StoredOrNone(status, raw, js_code);
}

// ---------------------------------------------------------------------------------------
// AsyncPublisher

// What the ack handler reaches: the tags of the messages in flight, keyed by the natsMsg
// nats.c hands back with each outcome.
struct AsyncPublisher::State {
  Callback callback;  // emptied when the publisher goes away with outcomes still due
  mutable std::mutex mutex;
  std::condition_variable idle_cv;
  std::unordered_map<natsMsg*, uint64_t> tags;  // guarded by mutex
  size_t outstanding = 0;                       // guarded by mutex: sent, outcome not handled
  int64_t longest_wait_ms = 0;                  // guarded by mutex
  // An outcome was a timeout: its answer may still come, on the context's reply
  // subscription. Guarded by mutex.
  bool timed_out = false;
};

NatsResult<std::unique_ptr<AsyncPublisher>> AsyncPublisher::Create(NatsConnection& connection,
                                                                   Callback on_outcome) {
  auto state = std::make_unique<State>();
  state->callback = std::move(on_outcome);
  jsOptions options;
  jsOptions_Init(&options);
  options.Wait = connection.options().request_timeout_ms;
  options.PublishAsync.AckHandler = &AsyncPublisher::OnAck;
  options.PublishAsync.AckHandlerClosure = state.get();
  options.PublishAsync.MaxPending = 0;  // no limit: callers bound what they keep in flight
  auto js = NewContext(connection.handle(), options);
  if (!js) return tl::unexpected(js.error());
  return std::unique_ptr<AsyncPublisher>(
      new AsyncPublisher(connection, std::move(*js), state.release()));
}

AsyncPublisher::AsyncPublisher(NatsConnection& connection, JsHandle js, State* state)
    : connection_(connection), js_(std::move(js)), state_(state) {}

AsyncPublisher::~AsyncPublisher() {
  bool idle;
  bool answers_may_come;
  {
    std::unique_lock lock(state_->mutex);
    const auto bound = std::chrono::milliseconds(state_->longest_wait_ms + 2000);
    idle = state_->idle_cv.wait_for(lock, bound, [this] { return state_->outstanding == 0; });
    if (!idle) state_->callback = nullptr;
    answers_may_come = !idle || state_->timed_out;
  }
  // jsCtx_Destroy destroys the context's reply subscription directly, the use nats.c
  // 3.4.1's read loop can crash on (see nats_client.h) if an answer comes meanwhile. When
  // one may still come, the connection keeps the context (subscribed, answering nobody)
  // until it closes.
  if (answers_may_come) connection_.KeepUntilClosed(std::move(js_));
  js_.reset();
  // An outcome nats.c had begun to deliver may still arrive: keep what it touches.
  if (idle) delete state_;
}

void AsyncPublisher::OnAck(jsCtx*, natsMsg* msg, jsPubAck* ack, jsPubAckErr* error, void* closure) {
  auto* state = static_cast<State*>(closure);
  const MsgHandle owned(msg);
  NatsResult<PubAck> outcome =
      ack != nullptr ? NatsResult<PubAck>(ToPubAck(*ack))
                     : tl::unexpected(NatsError{error->Err, static_cast<int>(error->ErrCode),
                                                error->ErrText != nullptr ? error->ErrText : ""});
  std::unique_lock lock(state->mutex);
  if (!outcome && outcome.error().status == NATS_TIMEOUT) state->timed_out = true;
  const auto it = state->tags.find(msg);
  if (it == state->tags.end()) return;
  const uint64_t tag = it->second;
  state->tags.erase(it);
  // The callback runs unlocked; outstanding drops only after it, so that the destructor
  // never frees what a running callback uses.
  Callback callback = state->callback;
  lock.unlock();
  if (callback) callback(tag, std::move(outcome));
  lock.lock();
  --state->outstanding;
  if (state->outstanding == 0) state->idle_cv.notify_all();
}

NatsStatus AsyncPublisher::Publish(uint64_t tag, const Publication& publication,
                                   int64_t max_wait_ms) {
  if (max_wait_ms <= 0) {
    return tl::unexpected(NatsError{NATS_INVALID_ARG, 0, "asynchronous publish needs a MaxWait"});
  }
  auto msg = BuildMessage(publication);
  if (!msg) return tl::unexpected(msg.error());
  natsMsg* raw = msg->get();
  {
    // Registered before sending: the outcome may come before js_PublishMsgAsync returns.
    std::lock_guard lock(state_->mutex);
    state_->tags.emplace(raw, tag);
    ++state_->outstanding;
    state_->longest_wait_ms = std::max(state_->longest_wait_ms, max_wait_ms);
  }
  jsPubOptions options;
  jsPubOptions_Init(&options);
  options.MaxWait = max_wait_ms;
  natsMsg* sent = msg->release();
  const natsStatus status = js_PublishMsgAsync(js_.get(), &sent, &options);
  if (status != NATS_OK) {
    // nats.c kept no reference: `sent` is still ours, and no outcome will come.
    const MsgHandle unsent(sent);
    std::lock_guard lock(state_->mutex);
    state_->tags.erase(raw);
    if (--state_->outstanding == 0) state_->idle_cv.notify_all();
    return Fail(status);
  }
  return {};
}

size_t AsyncPublisher::outstanding() const {
  std::lock_guard lock(state_->mutex);
  return state_->outstanding;
}

// ---------------------------------------------------------------------------------------
// OrderedConsumer

NatsResult<std::unique_ptr<OrderedConsumer>> OrderedConsumer::Start(NatsConnection& connection,
                                                                    const std::string& stream,
                                                                    const std::string& subject,
                                                                    uint64_t start_seq,
                                                                    int64_t heartbeat_ms) {
  jsOptions options;
  jsOptions_Init(&options);
  options.Wait = connection.options().request_timeout_ms;
  auto js = NewContext(connection.handle(), options);
  if (!js) return tl::unexpected(js.error());
  jsSubOptions sub_options;
  jsSubOptions_Init(&sub_options);
  sub_options.Stream = stream.c_str();
  sub_options.Ordered = true;
  sub_options.Config.DeliverPolicy = js_DeliverByStartSequence;
  sub_options.Config.OptStartSeq = start_seq;
  // nats.c declares a heartbeat missed after twice this: then it recreates the consumer.
  sub_options.Config.Heartbeat = heartbeat_ms * kNanosPerMilli;
  natsSubscription* raw = nullptr;
  jsErrCode js_code = kNoJsError;
  const natsStatus status =
      js_SubscribeSync(&raw, js->get(), subject.c_str(), nullptr, &sub_options, &js_code);
  if (status != NATS_OK) return Fail(status, js_code);
  SubscriptionHandle subscription(raw, SubscriptionRetirer{&connection});
  natsSubscription_SetPendingLimits(raw, -1, -1);
  return std::unique_ptr<OrderedConsumer>(
      new OrderedConsumer(std::move(*js), std::move(subscription)));
}

NatsResult<std::optional<StoredMessage>> OrderedConsumer::Next(int64_t wait_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  MsgHandle msg;
  jsMsgMetaData* meta = nullptr;
  while (meta == nullptr) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    natsMsg* next = nullptr;
    const natsStatus status =
        natsSubscription_NextMsg(&next, subscription_.get(), std::max<int64_t>(left.count(), 1));
    if (status == NATS_TIMEOUT) return std::optional<StoredMessage>();
    if (status != NATS_OK) return Fail(status);
    msg.reset(next);
    // A message without JetStream metadata is not a stream message (a control message
    // nats.c let through): skip it.
    if (natsMsg_GetMetaData(&meta, next) != NATS_OK) meta = nullptr;
  }
  natsMsg* raw = msg.get();
  StoredMessage stored;
  stored.seq = meta->Sequence.Stream;
  stored.time_ns = meta->Timestamp;
  jsMsgMetaData_Destroy(meta);
  stored.subject = natsMsg_GetSubject(raw);
  stored.msg_id = HeaderValue(raw, "Nats-Msg-Id");
  stored.data.assign(natsMsg_GetData(raw), static_cast<size_t>(natsMsg_GetDataLength(raw)));
  return std::optional<StoredMessage>(std::move(stored));
}

NatsStatus NatsConnection::PublishPlain(const std::string& subject, std::string_view data) {
  const natsStatus status = natsConnection_Publish(connection_, subject.c_str(), data.data(),
                                                   static_cast<int>(data.size()));
  if (status != NATS_OK) return Fail(status);
  return {};
}

// ---------------------------------------------------------------------------------------
// PlainSubscriber

NatsResult<std::unique_ptr<PlainSubscriber>> PlainSubscriber::Start(NatsConnection& connection,
                                                                    const std::string& subject) {
  natsSubscription* raw = nullptr;
  const natsStatus status =
      natsConnection_SubscribeSync(&raw, connection.handle(), subject.c_str());
  if (status != NATS_OK) return Fail(status);
  SubscriptionHandle subscription(raw, SubscriptionRetirer{&connection});
  natsSubscription_SetPendingLimits(raw, -1, -1);
  return std::unique_ptr<PlainSubscriber>(new PlainSubscriber(std::move(subscription)));
}

NatsResult<std::optional<std::string>> PlainSubscriber::Next(int64_t wait_ms) {
  natsMsg* next = nullptr;
  const natsStatus status =
      natsSubscription_NextMsg(&next, subscription_.get(), std::max<int64_t>(wait_ms, 1));
  if (status == NATS_TIMEOUT) return std::optional<std::string>();
  if (status != NATS_OK) return Fail(status);
  const MsgHandle msg(next);
  return std::optional<std::string>(
      std::string(natsMsg_GetData(next), static_cast<size_t>(natsMsg_GetDataLength(next))));
}

}  // namespace tally::cluster
