#include "programs/cluster_tool.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <thread>

namespace tally::programs {
namespace {

using Clock = std::chrono::steady_clock;

// "a=1,b=x" as {a: 1, b: x}.
std::map<std::string, std::string, std::less<>> Fields(std::string_view text) {
  std::map<std::string, std::string, std::less<>> fields;
  while (!text.empty()) {
    const size_t comma = std::min(text.find(','), text.size());
    const std::string_view field = text.substr(0, comma);
    if (const size_t equals = field.find('='); equals != std::string_view::npos) {
      fields.emplace(field.substr(0, equals), field.substr(equals + 1));
    }
    text.remove_prefix(std::min(comma + 1, text.size()));
  }
  return fields;
}

int64_t Number(std::string_view text) {
  int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::string Get(const std::map<std::string, std::string, std::less<>>& fields,
                std::string_view name) {
  const auto it = fields.find(name);
  return it == fields.end() ? std::string() : it->second;
}

// Whether `key` is `prefix` followed by a decimal (node0, partition12).
bool Numbered(std::string_view key, std::string_view prefix) {
  return key.size() > prefix.size() && key.starts_with(prefix) &&
         std::all_of(key.begin() + static_cast<std::ptrdiff_t>(prefix.size()), key.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

const ClusterToolNode* FindByAddress(const ClusterView& view, std::string_view address) {
  for (const ClusterToolNode& node : view.nodes) {
    if (node.address == address) return &node;
  }
  return nullptr;
}

const ClusterToolNode* Self(const ClusterView& view) {
  for (const ClusterToolNode& node : view.nodes) {
    if (node.self) return &node;
  }
  return nullptr;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// A connection to options.server, its INFO cluster read on demand.
class Node {
 public:
  explicit Node(const ClusterToolOptions& options) : options_(options) {}

  Status Connect() {
    return client_.Connect(options_.server, options_.tallyd, std::chrono::seconds(5),
                           std::chrono::seconds(10));
  }
  Result<ClusterView> View() {
    auto reply = client_.Check({"INFO", "cluster"});
    if (!reply) return tl::unexpected(reply.error());
    return ParseClusterInfo(reply->text);
  }
  Result<verify::Reply> Check(const std::vector<std::string>& args) { return client_.Check(args); }

 private:
  const ClusterToolOptions& options_;
  verify::RespClient client_;
};

// Polls the node's view until `done` says so (then kExitDone), printing the shares whenever
// they change; kExitTimedOut after options.timeout, kExitError when the node cannot answer.
template <typename Done>
int Watch(Node& node, const ClusterToolOptions& options, std::FILE* out, std::string_view what,
          Done done) {
  const auto start = Clock::now();
  std::string shown;
  while (true) {
    auto view = node.View();
    if (!view) {
      fmt::print(stderr, "tally cluster: {}\n", view.error().message);
      return kExitError;
    }
    if (const std::string shares = view->Shares(); shares != shown) {
      fmt::print(out, "[{:6.1f}s] {}\n", Seconds(start), shares);
      std::fflush(out);
      shown = shares;
    }
    if (done(*view)) {
      fmt::print(out, "[{:6.1f}s] {}\n", Seconds(start), what);
      return kExitDone;
    }
    if (Clock::now() - start >= options.timeout) {
      fmt::print(stderr, "tally cluster: not done within {} s: {}\n", options.timeout.count(),
                 shown);
      return kExitTimedOut;
    }
    std::this_thread::sleep_for(options.poll);
  }
}

}  // namespace

bool ClusterView::AllOwned() const {
  return std::all_of(partitions.begin(), partitions.end(), [this](const auto& partition) {
    const ClusterToolNode* owner = FindByAddress(*this, partition.owner_address);
    return owner != nullptr && owner->live;
  });
}

int64_t ClusterView::Members() const {
  return std::count_if(nodes.begin(), nodes.end(),
                       [](const ClusterToolNode& node) { return node.live && !node.draining; });
}

bool ClusterView::Balanced() const {
  if (!AllOwned()) return false;
  for (const ClusterToolNode& node : nodes) {
    if (node.live && node.draining && node.owned > 0) return false;
  }
  const int64_t members = Members();
  if (members == 0) return false;
  const auto count = static_cast<int64_t>(partitions.size());
  const int64_t floor = count / members;
  const int64_t ceil = (count + members - 1) / members;
  return std::all_of(nodes.begin(), nodes.end(), [&](const ClusterToolNode& node) {
    return !node.live || node.draining || (node.owned >= floor && node.owned <= ceil);
  });
}

std::string ClusterView::Shares() const {
  std::string out;
  for (const ClusterToolNode& node : nodes) {
    if (!node.live) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {}{}", node.name, node.owned, node.draining ? " (draining)" : "");
  }
  return out.empty() ? "no live node" : out;
}

Result<ClusterView> ParseClusterInfo(std::string_view info) {
  ClusterView view;
  bool enabled = false;
  while (!info.empty()) {
    const size_t end = std::min(info.find('\n'), info.size());
    std::string_view line = info.substr(0, end);
    info.remove_prefix(std::min(end + 1, info.size()));
    if (line.ends_with('\r')) line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    const std::string_view value = line.substr(colon + 1);
    if (key == "cluster_enabled") {
      enabled = value == "1";
    } else if (key == "tally_node_name") {
      view.self_name = value;
    } else if (key == "tally_draining") {
      view.draining = value == "1";
    } else if (Numbered(key, "node")) {
      const auto fields = Fields(value);
      view.nodes.push_back({Get(fields, "name"), Get(fields, "address"), Get(fields, "live") == "1",
                            Get(fields, "self") == "1", Get(fields, "draining") == "1",
                            Number(Get(fields, "owned"))});
    } else if (Numbered(key, "partition")) {
      const auto fields = Fields(value);
      view.partitions.push_back({Get(fields, "slots"), Get(fields, "role"), Get(fields, "owner"),
                                 Get(fields, "owner_address"), Number(Get(fields, "lag"))});
    }
  }
  if (!enabled) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "this tallyd is no cluster node (INFO cluster: cluster_enabled:0)");
  }
  return view;
}

int ClusterStatus(const ClusterToolOptions& options, std::FILE* out) {
  Node node(options);
  auto view = node.Connect().and_then([&] { return node.View(); });
  if (!view) {
    fmt::print(stderr, "tally cluster: {}\n", view.error().message);
    return kExitError;
  }
  fmt::print(out, "asked: {} ({}){}\n", view->self_name, options.server,
             view->draining ? ", draining" : "");
  fmt::print(out, "nodes:\n");
  for (const ClusterToolNode& n : view->nodes) {
    fmt::print(out, "  {:<20} {:<22} {:<5} owns {:>4}{}{}\n", n.name, n.address,
               n.live ? "live" : "gone", n.owned, n.draining ? "  draining" : "",
               n.self ? "  (asked)" : "");
  }
  fmt::print(out, "partitions:\n");
  for (size_t p = 0; p < view->partitions.size(); ++p) {
    const ClusterToolPartition& partition = view->partitions[p];
    fmt::print(out, "  {:>4} slots {:<12} owner {:<20} here {:<10} lag {}\n", p, partition.slots,
               partition.owner.empty() ? "-" : partition.owner, partition.role, partition.lag);
  }
  fmt::print(out, "{}\n",
             view->Balanced()   ? "balanced"
             : view->AllOwned() ? "every partition owned; not balanced"
                                : "some partitions have no live owner");
  return kExitDone;
}

int ClusterRemoveNode(const ClusterToolOptions& options, std::FILE* out) {
  Node node(options);
  auto drained = node.Connect().and_then([&] { return node.Check({"CLUSTER.DRAIN"}); });
  if (!drained) {
    fmt::print(stderr, "tally cluster: {}\n", drained.error().message);
    return kExitError;
  }
  fmt::print(out, "{}: draining (its partitions are handed over one at a time)\n", options.server);
  return Watch(node, options, out, "it owns nothing: stop it now (tallyd on it can go)",
               [](const ClusterView& view) {
                 const ClusterToolNode* self = Self(view);
                 if (self == nullptr || self->owned != 0 || !view.AllOwned()) return false;
                 return std::none_of(view.partitions.begin(), view.partitions.end(),
                                     [&](const auto& partition) {
                                       return partition.owner_address == self->address;
                                     });
               });
}

int ClusterRebalance(const ClusterToolOptions& options, std::FILE* out) {
  Node node(options);
  if (auto connected = node.Connect(); !connected) {
    fmt::print(stderr, "tally cluster: {}\n", connected.error().message);
    return kExitError;
  }
  return Watch(node, options, out, "balanced", [&options](const ClusterView& view) {
    return (options.nodes == 0 || view.Members() == options.nodes) && view.Balanced();
  });
}

}  // namespace tally::programs
