#include "cluster/snapshot_codec.h"

#include <fmt/format.h>

#include <array>
#include <iterator>
#include <optional>

#include "core/integer.h"

namespace tally::cluster {
namespace {

constexpr std::string_view kManifestMagic = "tally-snapshot 1";
constexpr std::string_view kChunkMagic = "tally-snapshot-chunk 1 ";
constexpr std::string_view kCatalogMagic = "tally-catalog 1 ";

// The manifest's fields, one "name value" line each, in this order, after its magic line.
constexpr std::array<std::string_view, 9> kFields = {
    "partition", "id", "seq", "term", "writer", "first", "last", "chunks", "counters"};

// A decimal without leading zeros: one spelling for every number.
std::optional<uint64_t> Decimal(std::string_view text) {
  if (text.size() > 1 && text[0] == '0') return std::nullopt;
  return ParseUint64(text);
}

}  // namespace

std::string EncodeManifest(const SnapshotManifest& manifest) {
  return fmt::format(
      "{}\npartition {}\nid {}\nseq {}\nterm {}\nwriter {}\nfirst {}\nlast {}\nchunks {}\n"
      "counters {}",
      kManifestMagic, manifest.partition, manifest.id, manifest.position.seq,
      manifest.position.term, manifest.position.writer, manifest.first_seq, manifest.last_seq,
      manifest.chunks, manifest.counters);
}

Result<SnapshotManifest> DecodeManifest(std::string_view bytes) {
  if (!bytes.starts_with(kManifestMagic) || bytes.size() > 4096) {
    return Corruption("not a tally snapshot manifest");
  }
  bytes.remove_prefix(kManifestMagic.size());
  std::array<uint64_t, kFields.size()> values{};
  for (size_t i = 0; i < kFields.size(); ++i) {
    const std::string_view name = kFields[i];
    if (!bytes.starts_with('\n')) return Corruption(fmt::format("manifest: no field {}", name));
    bytes.remove_prefix(1);
    const size_t end = std::min(bytes.find('\n'), bytes.size());
    const std::string_view line = bytes.substr(0, end);
    bytes.remove_prefix(end);
    if (!line.starts_with(name) || line.size() < name.size() + 1 || line[name.size()] != ' ') {
      return Corruption(fmt::format("manifest: expected field {}", name));
    }
    const std::optional<uint64_t> value = Decimal(line.substr(name.size() + 1));
    if (!value) return Corruption(fmt::format("manifest: bad {}", name));
    values[i] = *value;
  }
  if (!bytes.empty()) return Corruption("manifest: trailing bytes");
  SnapshotManifest manifest;
  if (values[0] >= (1u << 16)) return Corruption("manifest: bad partition");
  manifest.partition = static_cast<uint32_t>(values[0]);
  manifest.id = values[1];
  manifest.position = {values[2], values[3], values[4]};
  manifest.first_seq = values[5];
  manifest.last_seq = values[6];
  manifest.chunks = values[7];
  manifest.counters = values[8];
  if (manifest.chunks == 0 || manifest.first_seq == 0 || manifest.last_seq < manifest.first_seq ||
      manifest.last_seq - manifest.first_seq + 1 < manifest.chunks) {
    return Corruption("manifest: its chunks do not fit its sequences");
  }
  return manifest;
}

std::string EncodeChunkPrefix(uint64_t id, uint64_t index) {
  return fmt::format("{}{} {}\n", kChunkMagic, id, index);
}

Result<SnapshotChunk> DecodeChunk(std::string_view bytes) {
  if (!bytes.starts_with(kChunkMagic)) return Corruption("not a tally snapshot chunk");
  bytes.remove_prefix(kChunkMagic.size());
  const size_t line_end = bytes.find('\n');
  if (line_end == std::string_view::npos || line_end > 41) {
    return Corruption("snapshot chunk: no header line");
  }
  const std::string_view line = bytes.substr(0, line_end);
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return Corruption("snapshot chunk: no index");
  const std::optional<uint64_t> id = Decimal(line.substr(0, space));
  const std::optional<uint64_t> index = Decimal(line.substr(space + 1));
  if (!id || !index) return Corruption("snapshot chunk: bad id or index");
  return SnapshotChunk{*id, *index, bytes.substr(line_end + 1)};
}

std::string EncodeCatalogSnapshot(const CatalogSnapshot& snapshot) {
  std::string out = fmt::format("{}{} {}\n", kCatalogMagic, snapshot.seq, snapshot.records.size());
  for (const auto& [name, value] : snapshot.records) {
    fmt::format_to(std::back_inserter(out), "{} {} ", name.size(), value.size());
    out += name;
    out += value;
    out += '\n';
  }
  return out;
}

Result<CatalogSnapshot> DecodeCatalogSnapshot(std::string_view bytes) {
  if (!bytes.starts_with(kCatalogMagic)) return Corruption("not a tally catalog snapshot");
  bytes.remove_prefix(kCatalogMagic.size());
  // "<a> <b>" up to the first `end`, both decimal; the bytes after it are left in `bytes`.
  const auto two_numbers = [&bytes](char end) -> std::optional<std::pair<uint64_t, uint64_t>> {
    const size_t stop = bytes.find(end);
    if (stop == std::string_view::npos || stop > 41) return std::nullopt;
    const std::string_view line = bytes.substr(0, stop);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    const std::optional<uint64_t> a = Decimal(line.substr(0, space));
    const std::optional<uint64_t> b = Decimal(line.substr(space + 1));
    if (!a || !b) return std::nullopt;
    bytes.remove_prefix(stop + 1);
    return std::pair{*a, *b};
  };
  const auto head = two_numbers('\n');
  if (!head) return Corruption("catalog snapshot: bad first line");
  CatalogSnapshot snapshot;
  snapshot.seq = head->first;
  for (uint64_t i = 0; i < head->second; ++i) {
    // The lengths end at the second space; the name and value follow.
    const size_t first = bytes.find(' ');
    const size_t second = first == std::string_view::npos ? first : bytes.find(' ', first + 1);
    if (second == std::string_view::npos) return Corruption("catalog snapshot: a record cut short");
    const std::optional<uint64_t> name_size = Decimal(bytes.substr(0, first));
    const std::optional<uint64_t> value_size = Decimal(bytes.substr(first + 1, second - first - 1));
    bytes.remove_prefix(second + 1);
    if (!name_size || !value_size || *name_size > bytes.size() ||
        *value_size >= bytes.size() - *name_size || bytes[*name_size + *value_size] != '\n') {
      return Corruption("catalog snapshot: a malformed record");
    }
    snapshot.records.emplace_back(std::string(bytes.substr(0, *name_size)),
                                  std::string(bytes.substr(*name_size, *value_size)));
    bytes.remove_prefix(*name_size + *value_size + 1);
  }
  if (!bytes.empty()) return Corruption("catalog snapshot: trailing bytes");
  return snapshot;
}

}  // namespace tally::cluster
