#include "cluster/member_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace tally::cluster {
namespace {

// A heartbeat's text, one field per line, in this order:
//   tally-member 1
//   id <40 lower-case hex characters>
//   name <1-128 printable bytes, no space>
//   redis <host:port>
//   http <host:port, or nothing>
//   owned <partition,partition,... ascending, or nothing>   (decimals without leading zeros)
//   releasing <the same>
//   leaving <0 or 1>
//   draining <0 or 1>
//   checkpointed <sequence,sequence,... one per partition, or nothing>
//   changes <decimal>
//   seq <decimal>
constexpr std::string_view kMagic = "tally-member 1";
constexpr size_t kMaxField = 256;

// A decimal without a sign or leading zeros (one spelling for every number).
bool ParseUint(std::string_view text, uint64_t* value) {
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0')) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size();
}

// Comma-separated decimals; nothing for none.
template <typename Number>
std::string JoinNumbers(const std::vector<Number>& numbers) {
  std::string out;
  for (const Number number : numbers) {
    if (!out.empty()) out += ',';
    out += std::to_string(number);
  }
  return out;
}

// The same back, each number taken only when accept(number, *out) says so (at most 65,536).
template <typename Number, typename Accept>
bool ParseNumbers(std::string_view text, std::vector<Number>* out, Accept accept) {
  out->clear();
  while (!text.empty()) {
    const size_t comma = text.find(',');
    uint64_t number = 0;
    if (!ParseUint(text.substr(0, comma), &number) || out->size() >= (1u << 16) ||
        !accept(number, *out)) {
      return false;
    }
    out->push_back(static_cast<Number>(number));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return false;
  }
  return true;
}

// Partitions: below 65,536, ascending.
bool ParsePartitions(std::string_view text, std::vector<uint32_t>* out) {
  return ParseNumbers(text, out, [](uint64_t p, const std::vector<uint32_t>& before) {
    return p < (1u << 16) && (before.empty() || p > before.back());
  });
}

bool PrintableWord(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c > ' ' && c < 127; });
}

bool IsNodeId(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

std::string EncodeMember(const MemberInfo& info) {
  return fmt::format(
      "{}\nid {}\nname {}\nredis {}\nhttp {}\nowned {}\nreleasing {}\nleaving {}\ndraining {}\n"
      "checkpointed {}\nchanges {}\nseq {}",
      kMagic, info.node_id, info.node_name, info.redis_address, info.http_address,
      JoinNumbers(info.owned), JoinNumbers(info.releasing), info.leaving ? 1 : 0,
      info.draining ? 1 : 0, JoinNumbers(info.checkpointed), info.change_floor, info.sequence);
}

Result<MemberInfo> DecodeMember(std::string_view bytes) {
  static constexpr std::string_view kFields[] = {"id",           "name",      "redis",   "http",
                                                 "owned",        "releasing", "leaving", "draining",
                                                 "checkpointed", "changes",   "seq"};
  if (!bytes.starts_with(kMagic) || bytes.size() > 64 * 1024) {
    return Corruption("not a tally heartbeat");
  }
  bytes.remove_prefix(kMagic.size());
  MemberInfo info;
  for (const std::string_view name : kFields) {
    if (!bytes.starts_with('\n')) return Corruption(fmt::format("heartbeat: no field {}", name));
    bytes.remove_prefix(1);
    const size_t end = std::min(bytes.find('\n'), bytes.size());
    std::string_view line = bytes.substr(0, end);
    bytes.remove_prefix(end);
    if (!line.starts_with(name) || line.size() < name.size() + 1 || line[name.size()] != ' ') {
      return Corruption(fmt::format("heartbeat: expected field {}", name));
    }
    const std::string_view value = line.substr(name.size() + 1);
    if (value.size() > kMaxField && name != "owned" && name != "releasing" &&
        name != "checkpointed") {
      return Corruption(fmt::format("heartbeat: field {} too long", name));
    }
    if (!value.empty() && !PrintableWord(value)) {
      return Corruption(fmt::format("heartbeat: field {} is not one printable word", name));
    }
    uint64_t number = 0;
    bool ok = true;
    if (name == "id") {
      ok = IsNodeId(value);
      info.node_id = value;
    } else if (name == "name") {
      ok = !value.empty();
      info.node_name = value;
    } else if (name == "redis") {
      ok = value.find(':') != std::string_view::npos;
      info.redis_address = value;
    } else if (name == "http") {
      info.http_address = value;
    } else if (name == "owned") {
      ok = ParsePartitions(value, &info.owned);
    } else if (name == "releasing") {
      ok = ParsePartitions(value, &info.releasing);
    } else if (name == "leaving") {
      ok = value == "0" || value == "1";
      info.leaving = value == "1";
    } else if (name == "draining") {
      ok = value == "0" || value == "1";
      info.draining = value == "1";
    } else if (name == "checkpointed") {
      ok = ParseNumbers(value, &info.checkpointed,
                        [](uint64_t, const std::vector<uint64_t>&) { return true; });
    } else if (name == "changes") {
      ok = ParseUint(value, &number);
      info.change_floor = number;
    } else {
      ok = ParseUint(value, &number);
      info.sequence = number;
    }
    if (!ok) return Corruption(fmt::format("heartbeat: bad {} '{}'", name, value));
  }
  if (!bytes.empty()) return Corruption("heartbeat: trailing bytes");
  return info;
}

}  // namespace tally::cluster
