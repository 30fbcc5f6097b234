#include "servers/http/routes.h"

#include <fmt/format.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/json_writer.h"
#include "core/version.h"
#include "engine/databases.h"
#include "servers/http/cluster_json.h"
#include "servers/http/dashboard_assets.h"
#include "servers/http/openapi.h"
#include "servers/http/request_target.h"
#include "servers/http/router.h"
#include "servers/http/value_json.h"

namespace tally::http {

// What a handler gets: the request, and what the router took from its target.
struct Api::Call {
  const ApiRequest& request;
  const RequestTarget& target;
  std::vector<std::string> params;  // "{name}" then "*" segments, decoded

  std::optional<std::string_view> Query(std::string_view name) const {
    for (const auto& [key, value] : target.query) {
      if (key == name) return value;
    }
    return std::nullopt;
  }
  // The parameters after the first `skip` (the "*" segments), as views.
  std::vector<std::string_view> Rest(size_t skip) const {
    return {params.begin() + static_cast<std::ptrdiff_t>(skip), params.end()};
  }
};

// Per-thread buffers reused from request to request.
struct Api::Scratch {
  derived::ChangeDecoder decoder;
  simdjson::dom::parser json;
};

struct Api::Route {
  RoutePattern pattern;
  Handler handler = nullptr;
  // The Redis command whose permission (ACL) the route needs; empty: open to everyone.
  // /v1/status is DBSIZE's and /v1/hot SCAN's (both @read, so that a read-only user has the
  // dashboard), /metrics INFO's.
  std::string_view command;
};

// The route table; the router matches in this order.
const Api::Route Api::kRoutes[] = {
    {{"POST", "/v1/changes", "id"}, &Api::PostChanges, "counter.push"},
    {{"POST", "/v1/backfill/{counter}", "id"}, &Api::PostBackfill, "counter.backfill"},
    {{"GET", "/v1/value/{counter}/*", ""}, &Api::GetValue, "counter.get"},
    {{"POST", "/v1/values", ""}, &Api::PostValues, "counter.get"},
    {{"GET", "/v1/list/{counter}/*", "cursor limit"}, &Api::GetList, "counter.scan"},
    {{"GET", "/v1/top/{counter}/*", "k"}, &Api::GetTop, "counter.top"},
    {{"GET", "/v1/range/{counter}/*", "from to"}, &Api::GetRange, "counter.range"},
    {{"POST", "/v1/definitions", ""}, &Api::PostDefinitions, "counter.define"},
    {{"GET", "/v1/definitions", ""}, &Api::GetDefinitions, "counter.list"},
    {{"DELETE", "/v1/definitions/{counter}", ""}, &Api::DeleteDefinition, "counter.drop"},
    {{"GET", "/v1/status", ""}, &Api::GetStatus, "dbsize"},
    {{"GET", "/v1/cluster", ""}, &Api::GetCluster, "cluster"},
    {{"GET", "/healthz", ""}, &Api::GetHealth, ""},
    {{"GET", "/readyz", ""}, &Api::GetReady, ""},
    {{"GET", "/metrics", ""}, &Api::GetMetrics, "info"},
    {{"GET", "/v1/hot", "n"}, &Api::GetHot, "scan"},
    {{"GET", "/v1/events", "key* prefix* token"}, &Api::GetEvents, "subscribe"},
    {{"GET", "/v1/subscribe", "key* prefix* token"}, &Api::GetSubscribe, "subscribe"},
    {{"GET", "/", ""}, &Api::GetPage, ""},
    {{"GET", "/assets/*", ""}, &Api::GetAsset, ""},
    {{"GET", "/openapi.json", ""}, &Api::GetOpenApi, ""},
};

const Router& Api::TheRouter() {
  static const Router kRouter = [] {
    std::vector<RoutePattern> patterns;
    for (const Route& route : kRoutes) patterns.push_back(route.pattern);
    return Router(patterns);
  }();
  return kRouter;
}

namespace {

int StatusOf(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kWrongType:
      return 400;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kOverflow:
      return 409;  // the change conflicts with the counters' current values
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kIOError:
    case ErrorCode::kCorruption:
    case ErrorCode::kInternal:
      break;
  }
  return 500;
}

ApiResponse Fail(int status, std::string_view message) { return ErrorResponse(status, message); }

ApiResponse Fail(const Error& error) { return Fail(StatusOf(error.code), error.message); }

ApiResponse Ok(std::string body, uint64_t required_epoch = 0) {
  ApiResponse response;
  response.body = std::move(body);
  response.required_epoch = required_epoch;
  return response;
}

// A count parameter (?limit=, ?k=): absent = `fallback`, else an integer in 1..kMaxLimit.
Result<size_t> CountParameter(std::optional<std::string_view> text, std::string_view name,
                              int64_t fallback) {
  if (!text) return static_cast<size_t>(fallback);
  int64_t value = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, error] = std::from_chars(text->data(), end, value);
  if (text->empty() || error != std::errc() || ptr != end || value < 1 || value > Api::kMaxLimit) {
    return InvalidArgument(
        fmt::format("{} must be an integer from 1 to {}, got \"{}\"", name, Api::kMaxLimit, *text));
  }
  return static_cast<size_t>(value);
}

// {"key": ..., "value": ...}
void WriteItem(const derived::KeyValue& item, const std::vector<std::string>& names,
               JsonWriter* json) {
  json->BeginObject().Key("key").String(item.key).Key("value");
  WriteValue(item, names, json);
  json->EndObject();
}

void WriteItems(const derived::Page& page, JsonWriter* json) {
  json->Key("items").BeginArray();
  for (const auto& item : page.items) WriteItem(item, page.names, json);
  json->EndArray();
}

// A JSON scalar of a /v1/values key as the text of a key part (ParseKeyPart's input).
Result<std::string> KeyPartText(const simdjson::dom::element& element) {
  switch (element.type()) {
    case simdjson::dom::element_type::INT64:
      return std::to_string(element.get_int64().value_unsafe());
    case simdjson::dom::element_type::UINT64:
      return std::to_string(element.get_uint64().value_unsafe());
    case simdjson::dom::element_type::BOOL:
      return std::string(element.get_bool().value_unsafe() ? "true" : "false");
    case simdjson::dom::element_type::NULL_VALUE:
      return std::string("\\N");
    case simdjson::dom::element_type::STRING:
      return std::string(element.get_string().value_unsafe());
    case simdjson::dom::element_type::DOUBLE:
      return InvalidArgument(
          "a key part must be an integer, a string, true, false or null, "
          "got a number that is not an integer");
    case simdjson::dom::element_type::ARRAY:
      return InvalidArgument(
          "a key part must be an integer, a string, true, false or null, "
          "got an array");
    case simdjson::dom::element_type::OBJECT:
      break;
  }
  return InvalidArgument(
      "a key part must be an integer, a string, true, false or null, "
      "got an object");
}

constexpr std::string_view kValuesShape =
    R"(the body must be a JSON object {"counter": "name", "keys": [[part, ...], ...]})";

}  // namespace

ApiResponse ErrorResponse(int status, std::string_view message) {
  ApiResponse response;
  response.status = status;
  response.body = ErrorJson(message);
  return response;
}

Api::Api(servers::Services services, ApiOptions options)
    : services_(std::move(services)),
      engine_(services_.engine),
      derived_(*services_.derived),
      options_(std::move(options)),
      acl_(services_.acl),
      scratch_(std::make_unique<Scratch>()) {
  if (acl_ == nullptr) {
    // No command list: the default user is the only one, and it may run everything.
    own_acl_ = std::make_unique<auth::Acl>(std::vector<auth::CommandInfo>{}, options_.password);
    acl_ = own_acl_.get();
  }
}

Api::~Api() = default;

ApiResponse Api::Handle(const ApiRequest& request) {
  int route = -1;
  ApiResponse response = Dispatch(request, &route);
  if (options_.requests != nullptr) options_.requests->Count(route, response.status);
  return response;
}

ApiResponse Api::Dispatch(const ApiRequest& request, int* route) {
  user_.reset();
  auto target = ParseRequestTarget(request.target);
  if (!target) return Fail(400, target.error().message);
  RouteMatch match = TheRouter().Match(request.method, *target);
  switch (match.kind) {
    case RouteMatch::Kind::kNotFound: {
      const size_t question = request.target.find('?');
      return Fail(404, fmt::format("no such route: {}", request.target.substr(0, question)));
    }
    case RouteMatch::Kind::kWrongMethod: {
      ApiResponse response = Fail(405, fmt::format("method {} not allowed here (allowed: {})",
                                                   request.method, match.allow));
      response.allow = std::move(match.allow);
      return response;
    }
    case RouteMatch::Kind::kBadRequest:
      return Fail(400, match.error);
    case RouteMatch::Kind::kFound:
      break;
  }
  const Route& matched = kRoutes[match.route];
  *route = static_cast<int>(match.route);
  const bool open =
      matched.command.empty() || (matched.handler == &Api::GetMetrics && options_.public_metrics);
  if (!open) {
    if (auto refused = Authorize(request, *target, matched.command)) return std::move(*refused);
  }
  const Call call{request, *target, std::move(match.params)};
  // Errors are values here; an exception (out of memory, a bug) must not take the
  // connection's thread down with it.
  try {
    return (this->*matched.handler)(call);
  } catch (const std::exception& e) {
    spdlog::error("HTTP {} {}: {}", request.method, request.target, e.what());
    return Fail(500, fmt::format("internal error: {}", e.what()));
  }
}

ApiResponse Api::PostChanges(const Call& call) { return Push(call, {}); }

ApiResponse Api::PostBackfill(const Call& call) { return Push(call, call.params[0]); }

ApiResponse Api::Push(const Call& call, std::string_view only_counter) {
  std::string_view id;
  const auto query_id = call.Query("id");
  if (query_id) id = *query_id;
  if (call.request.has_idempotency_key) {
    if (query_id && *query_id != call.request.idempotency_key) {
      return Fail(400, "the Idempotency-Key header and the id parameter differ");
    }
    id = call.request.idempotency_key;
  }
  if ((query_id || call.request.has_idempotency_key) && id.empty()) {
    return Fail(400, "the idempotency key is empty");
  }
  // In a cluster a push goes through the cluster's change stream (cluster/change_front.h).
  auto outcome =
      services_.cluster_changes != nullptr
          ? services_.cluster_changes->Push(call.request.body, id, only_counter, scratch_->decoder)
          : derived_.Push(call.request.body, id, scratch_->decoder, only_counter);
  if (!outcome) return Fail(outcome.error());
  JsonWriter json;
  json.BeginObject()
      .Key("changes")
      .UInt(outcome->changes)
      .Key("applied")
      .UInt(outcome->applied)
      .Key("duplicates")
      .UInt(outcome->duplicates)
      .Key("increments")
      .UInt(outcome->increments)
      .EndObject();
  ApiResponse response = Ok(json.Take(), outcome->required_epoch);
  response.wrote = outcome->applied > 0;
  return response;
}

ApiResponse Api::GetValue(const Call& call) {
  const std::vector<std::string_view> parts = call.Rest(1);
  auto key = derived_.KeyOf(call.params[0], parts);
  if (!key) return Fail(key.error());
  if (auto refused = RefuseRead(call.request, *key, /*prefix=*/false)) return std::move(*refused);
  auto page = derived_.Read(call.params[0], {&*key, 1});
  if (!page) return Fail(page.error());
  JsonWriter json;
  WriteItem(page->items.at(0), page->names, &json);
  return Ok(json.Take(), page->required_epoch);
}

ApiResponse Api::PostValues(const Call& call) {
  simdjson::dom::element document;
  if (auto error =
          scratch_->json.parse(call.request.body.data(), call.request.body.size()).get(document)) {
    // simdjson refuses an integer past 64 bits as a malformed number: say what it is.
    if (error == simdjson::NUMBER_ERROR) {
      return Fail(400,
                  "invalid JSON: a number out of range (an integer key part is an int64, "
                  "-9223372036854775808 to 9223372036854775807)");
    }
    return Fail(400, fmt::format("invalid JSON: {}", simdjson::error_message(error)));
  }
  simdjson::dom::object object;
  if (document.get(object)) return Fail(400, kValuesShape);
  std::optional<std::string_view> counter;
  simdjson::dom::array keys;
  bool has_keys = false;
  for (const auto field : object) {
    if (field.key == "counter") {
      std::string_view name;
      if (field.value.get(name)) return Fail(400, "\"counter\" must be a string");
      counter = name;
    } else if (field.key == "keys") {
      if (field.value.get(keys)) return Fail(400, "\"keys\" must be an array of arrays");
      has_keys = true;
    } else {
      return Fail(400, fmt::format("unknown field \"{}\": {}", field.key, kValuesShape));
    }
  }
  if (!counter) return Fail(400, "\"counter\" is missing");
  if (!has_keys) return Fail(400, "\"keys\" is missing");
  // The counter must exist even when no key is asked for.
  if (auto prefix = derived_.PrefixOf(*counter, {}); !prefix) return Fail(prefix.error());

  std::vector<std::string> canonical;
  canonical.reserve(keys.size());
  std::vector<std::string> texts;
  std::vector<std::string_view> parts;
  size_t index = 0;
  for (const auto key : keys) {
    simdjson::dom::array elements;
    if (key.get(elements)) {
      return Fail(400, fmt::format("keys[{}] must be an array of key parts", index));
    }
    texts.clear();
    size_t part_index = 0;
    for (const auto element : elements) {
      auto text = KeyPartText(element);
      if (!text) {
        return Fail(400, fmt::format("keys[{}][{}]: {}", index, part_index, text.error().message));
      }
      texts.push_back(std::move(*text));
      ++part_index;
    }
    parts.assign(texts.begin(), texts.end());
    auto canonical_key = derived_.KeyOf(*counter, parts);
    if (!canonical_key) {
      return Fail(StatusOf(canonical_key.error().code),
                  fmt::format("keys[{}]: {}", index, canonical_key.error().message));
    }
    if (auto refused = RefuseRead(call.request, *canonical_key, /*prefix=*/false)) {
      return std::move(*refused);
    }
    canonical.push_back(std::move(*canonical_key));
    ++index;
  }
  auto page = derived_.Read(*counter, canonical);
  if (!page) return Fail(page.error());
  JsonWriter json;
  json.BeginObject().Key("values").BeginArray();
  for (const derived::KeyValue& item : page->items) WriteItem(item, page->names, &json);
  json.EndArray().EndObject();
  return Ok(json.Take(), page->required_epoch);
}

ApiResponse Api::GetList(const Call& call) {
  auto limit = CountParameter(call.Query("limit"), "limit", kDefaultLimit);
  if (!limit) return Fail(limit.error());
  const std::string_view counter = call.params[0];
  const std::vector<std::string_view> parts = call.Rest(1);
  auto prefix = derived_.PrefixOf(counter, parts);
  if (!prefix) return Fail(prefix.error());
  if (auto refused = RefuseRead(call.request, *prefix, /*prefix=*/true)) return std::move(*refused);
  auto page = derived_.List(counter, *prefix, call.Query("cursor").value_or(""), *limit);
  if (!page) return Fail(page.error());
  JsonWriter json;
  json.BeginObject();
  WriteItems(*page, &json);
  json.Key("next_cursor").String(page->next_cursor).EndObject();
  return Ok(json.Take(), page->required_epoch);
}

ApiResponse Api::GetTop(const Call& call) {
  auto k = CountParameter(call.Query("k"), "k", kDefaultTopK);
  if (!k) return Fail(k.error());
  const std::string_view counter = call.params[0];
  const std::vector<std::string_view> parts = call.Rest(1);
  auto prefix = derived_.PrefixOf(counter, parts);
  if (!prefix) return Fail(prefix.error());
  if (auto refused = RefuseRead(call.request, *prefix, /*prefix=*/true)) return std::move(*refused);
  auto page = derived_.Top(counter, *prefix, *k);
  if (!page) return Fail(page.error());
  JsonWriter json;
  json.BeginObject();
  WriteItems(*page, &json);
  json.EndObject();
  return Ok(json.Take(), page->required_epoch);
}

ApiResponse Api::GetRange(const Call& call) {
  const std::optional<std::string_view> from = call.Query("from");
  const std::optional<std::string_view> to = call.Query("to");
  if (!from || !to) {
    return Fail(400,
                "a range needs ?from=<instant>&to=<instant> (2024-05-01T00:00:00Z, "
                "20240501T000000Z or Unix seconds)");
  }
  // A group's time buckets: the user must be allowed to read every key of the counter.
  auto family = derived_.PrefixOf(call.params[0], {});
  if (!family) return Fail(family.error());
  if (auto refused = RefuseRead(call.request, *family, /*prefix=*/true)) return std::move(*refused);
  auto range = derived_.Range(call.params[0], call.Rest(1), *from, *to);
  if (!range) return Fail(range.error());
  JsonWriter json;
  json.BeginObject();
  // "sum" came first, when only counts and integer sums had ranges: kept for them.
  if (range->total.shown.empty()) json.Key("sum").Int(range->total.value);
  json.Key("value");
  WriteValue(range->total, range->names, &json);
  json.Key("buckets").UInt(range->buckets).EndObject();
  return Ok(json.Take(), range->required_epoch);
}

namespace {

ApiResponse Outcomes(const Result<std::vector<derived::StatementOutcome>>& outcomes) {
  if (!outcomes) return Fail(outcomes.error());
  JsonWriter json;
  json.BeginObject().Key("results").BeginArray();
  for (const auto& outcome : *outcomes) json.String(outcome.message);
  json.EndArray().EndObject();
  ApiResponse response = Ok(json.Take());
  // DROP COUNTER deletes the counter's groups from the keyspace.
  response.wrote = true;
  return response;
}

}  // namespace

ApiResponse Api::PostDefinitions(const Call& call) {
  // In a cluster every node runs the script, at its place in the cluster's change stream.
  if (services_.cluster_changes != nullptr) {
    return Outcomes(services_.cluster_changes->Define(call.request.body));
  }
  return Outcomes(derived_.Execute(call.request.body));
}

ApiResponse Api::GetDefinitions(const Call& call) {
  JsonWriter json;
  json.BeginObject().Key("sources").BeginArray();
  for (const auto& source : derived_.Sources()) {
    json.BeginObject().Key("name").String(source.name).Key("sql").String(source.sql).EndObject();
  }
  json.EndArray().Key("counters").BeginArray();
  for (const auto& counter : derived_.Counters()) {
    json.BeginObject()
        .Key("name")
        .String(counter.name)
        .Key("source")
        .String(counter.source)
        .Key("sql")
        .String(counter.sql)
        .Key("key_columns")
        .BeginArray();
    for (const auto& column : counter.key_columns) json.String(column);
    json.EndArray().Key("groups").UInt(counter.groups).EndObject();
  }
  json.EndArray().EndObject();
  return Ok(json.Take());
}

ApiResponse Api::DeleteDefinition(const Call& call) {
  Result<derived::StatementOutcome> outcome = [&]() -> Result<derived::StatementOutcome> {
    if (services_.cluster_changes == nullptr) return derived_.Drop(call.params[0]);
    if (auto known = derived_.KeyOf(call.params[0], {});
        !known && known.error().code == ErrorCode::kNotFound) {
      return tl::unexpected(known.error());
    }
    auto outcomes =
        services_.cluster_changes->Define(fmt::format("DROP COUNTER {}", call.params[0]));
    if (!outcomes) return tl::unexpected(outcomes.error());
    if (outcomes->empty()) return derived::StatementOutcome{};
    return outcomes->front();
  }();
  if (!outcome) return Fail(outcome.error());
  JsonWriter json;
  json.BeginObject().Key("results").BeginArray().String(outcome->message).EndArray().EndObject();
  ApiResponse response = Ok(json.Take());
  response.wrote = true;
  return response;
}

// The cluster's topology (cluster_json.h); {"cluster_enabled":false} on a single node.
ApiResponse Api::GetCluster([[maybe_unused]] const Call& call) {
  if (services_.cluster == nullptr) return Ok(R"({"cluster_enabled":false})");
  return Ok(ClusterJson(*services_.cluster->topology()));
}

// {"version":"0.1.0","durability":"sync","counters":N,"source":{figures as INFO's # Source,
// same names without "source_"}} ("source": null without --source).
ApiResponse Api::GetStatus(const Call& call) {
  std::string body = R"({"version":)";
  AppendJsonString(Version(), &body);
  body += R"(,"durability":)";
  body += engine_.durability() == engine::Durability::kSync ? R"("sync")" : R"("async")";
  fmt::format_to(std::back_inserter(body), R"(,"counters":{},"source":)",
                 derived_.Counters().size());
  if (!services_.source_report) {
    body += "null}";
    return Ok(std::move(body));
  }
  body += '{';
  bool first = true;
  for (const ReportField& field : services_.source_report()) {
    if (!first) body += ',';
    first = false;
    AppendJsonString(field.name, &body);
    body += ':';
    std::visit(
        [&body](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            body += value ? "true" : "false";
          } else if constexpr (std::is_same_v<T, double>) {
            fmt::format_to(std::back_inserter(body), "{:.3f}", std::isfinite(value) ? value : 0.0);
          } else if constexpr (std::is_same_v<T, std::string>) {
            AppendJsonString(value, &body);
          } else {
            fmt::format_to(std::back_inserter(body), "{}", value);
          }
        },
        field.value);
  }
  body += "}}";
  return Ok(std::move(body));
}

// Alive: commits to the store succeed. Else 503.
ApiResponse Api::GetHealth(const Call& call) {
  if (!engine_.committer().stats().healthy) return Fail(503, "commits to the store are failing");
  return Ok(R"({"status":"ok"})");
}

// Ready: commits to the store succeed and the readiness check (tallyd: every --source
// streaming, lag within --ready-max-lag-ms) passes. Not ready: 503 with
// {"status":"not ready","reason":"..."}.
ApiResponse Api::GetReady(const Call& call) {
  std::string reason;
  if (!engine_.committer().stats().healthy) {
    reason = "commits to the store are failing";
  } else if (services_.readiness) {
    if (auto status = services_.readiness(); !status) reason = status.error().message;
  }
  if (reason.empty()) return Ok(R"({"status":"ready"})");
  JsonWriter json;
  json.BeginObject().Key("status").String("not ready").Key("reason").String(reason).EndObject();
  ApiResponse response = Ok(json.Take());
  response.status = 503;
  return response;
}

ApiResponse Api::GetMetrics(const Call& call) {
  if (services_.metrics == nullptr) return Fail(404, "metrics are not served here");
  ApiResponse response = Ok(services_.metrics->Render());
  response.content_type = metrics::Registry::kContentType;
  return response;
}

// {"window_seconds":60,"counters":[{"key":"..","writes_per_second":12.5,"writes":750},...]},
// most written first; tally's own records left out.
ApiResponse Api::GetHot(const Call& call) {
  auto n = CountParameter(call.Query("n"), "n", kDefaultHotKeys);
  if (!n) return Fail(n.error());
  JsonWriter json;
  json.BeginObject()
      .Key("window_seconds")
      .Int(engine::HotKeys::kWindowSeconds)
      .Key("counters")
      .BeginArray();
  // Database 0's, the one the HTTP API serves (INFO hotkeys lists every database's), and
  // only the keys the user may read.
  const auto hidden = [this](std::string_view key) {
    return derived::IsInternalKey(key) || engine::DatabaseOf(key) != 0 || !MayRead(key);
  };
  for (const engine::HotKey& key : engine_.hot_keys().Top(*n, hidden)) {
    json.BeginObject()
        .Key("key")
        .String(key.key)
        .Key("writes_per_second")
        .Double(key.writes_per_second)
        .Key("writes")
        .UInt(key.writes)
        .EndObject();
  }
  json.EndArray().EndObject();
  return Ok(json.Take());
}

ApiResponse Api::GetEvents(const Call& call) { return Subscribe(call, /*websocket=*/false); }

ApiResponse Api::GetSubscribe(const Call& call) { return Subscribe(call, /*websocket=*/true); }

ApiResponse Api::Subscribe(const Call& call, bool websocket) {
  if (websocket && !call.request.websocket_upgrade) {
    return Fail(426,
                "this route is a WebSocket: send an upgrade request (or use GET /v1/events "
                "for Server-Sent Events)");
  }
  SubscriptionRequest subscription;
  subscription.websocket = websocket;
  for (const auto& [name, value] : call.target.query) {
    // The HTTP API follows database 0, where no key starts with the reserved prefix.
    if ((name == "key" || name == "prefix") && engine::IsReservedKey(value)) {
      return Fail(400, engine::kReservedKeyMessage);
    }
    if (name == "key") subscription.keys.push_back(value);
    if (name == "prefix") subscription.prefixes.push_back(value);
  }
  if (subscription.keys.empty() && subscription.prefixes.empty()) {
    return Fail(400, "name at least one counter: ?key=<key> or ?prefix=<key prefix> (repeatable)");
  }
  // A user follows only keys it may read (ACL): each key, every key under each prefix.
  for (const std::string& key : subscription.keys) {
    if (auto refused = RefuseRead(call.request, key, /*prefix=*/false)) return std::move(*refused);
  }
  for (const std::string& prefix : subscription.prefixes) {
    if (auto refused = RefuseRead(call.request, prefix, /*prefix=*/true))
      return std::move(*refused);
  }
  if (user_ != nullptr && !user_->unrestricted()) {
    subscription.restricted_to = user_;
    subscription.log_refusal = [log = RefusalLogger(call.request, user_->name())](
                                   std::string object) { log("key", std::move(object)); };
  }
  ApiResponse response;
  response.subscription = std::move(subscription);
  return response;
}

namespace {

// An embedded dashboard file, or 304 when the client's copy (If-None-Match) is current.
ApiResponse Serve(const DashboardAsset* asset, std::string_view if_none_match) {
  if (asset == nullptr) return Fail(404, "no such dashboard file");
  ApiResponse response;
  response.etag = asset->etag;
  response.cache_control = asset->cache_control;
  response.content_type = asset->content_type;
  if (EtagMatches(if_none_match, asset->etag)) {
    response.status = 304;
  } else {
    response.body = asset->body;
  }
  return response;
}

}  // namespace

ApiResponse Api::GetPage(const Call& call) {
  return Serve(FindDashboardAsset("/"), call.request.if_none_match);
}

ApiResponse Api::GetAsset(const Call& call) {
  std::string path = "/assets";
  for (const std::string& segment : call.params) path += "/" + segment;
  return Serve(FindDashboardAsset(path), call.request.if_none_match);
}

ApiResponse Api::GetOpenApi(const Call& call) { return Ok(std::string(OpenApiDocument())); }

// ---- tally_http_requests_total -------------------------------------------------------

ApiRequestCounts::ApiRequestCounts()
    : routes_(std::size(Api::kRoutes)),
      counts_(std::make_unique<metrics::Counter[]>((routes_ + 1) * kClasses)) {}

ApiRequestCounts::~ApiRequestCounts() = default;

void ApiRequestCounts::Count(int route, int status) {
  const size_t row = route < 0 ? routes_ : static_cast<size_t>(route);
  const int status_class = std::clamp(status / 100, 1, kClasses);
  counts_[row * kClasses + static_cast<size_t>(status_class - 1)].Add();
}

void ApiRequestCounts::Collect(metrics::SampleWriter& out) const {
  for (size_t row = 0; row <= routes_; ++row) {
    for (int status_class = 1; status_class <= kClasses; ++status_class) {
      const uint64_t count =
          counts_[row * kClasses + static_cast<size_t>(status_class - 1)].Value();
      if (count == 0) continue;
      const bool routed = row < routes_;
      out.Add({{"method", routed ? std::string(Api::kRoutes[row].pattern.method) : ""},
               {"route", routed ? std::string(Api::kRoutes[row].pattern.path) : ""},
               {"code", fmt::format("{}xx", status_class)}},
              count);
    }
  }
}

}  // namespace tally::http
