#include "cluster/source_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "core/integer.h"

namespace tally::cluster {

void AppendRowsHead(int64_t lsn, int64_t part, std::string_view sources, std::string* out) {
  fmt::format_to(std::back_inserter(*out), "#rows {} {} {}\n", lsn, part, sources);
}

void AppendTruncate(int64_t lsn, int64_t part, std::string_view source, std::string* out) {
  fmt::format_to(std::back_inserter(*out), "#truncate {} {} {}\n", lsn, part, source);
}

void AppendAt(int64_t lsn, std::string_view sources, std::string* out) {
  fmt::format_to(std::back_inserter(*out), "#at {} {}\n", lsn, sources);
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (size_t at = text.find(separator); at != std::string_view::npos; at = text.find(separator)) {
    parts.push_back(text.substr(0, at));
    text.remove_prefix(at + 1);
  }
  parts.push_back(text);
  return parts;
}

Result<std::vector<BatchSegment>> ParseBatch(std::string_view body) {
  std::vector<BatchSegment> segments;
  while (!body.empty()) {
    const size_t end = body.find('\n');
    const std::string_view head = body.substr(0, end);
    body.remove_prefix(end == std::string_view::npos ? body.size() : end + 1);
    // The rows: every line up to the next head.
    size_t rows_end = 0;
    while (rows_end < body.size() && body[rows_end] != '#') {
      const size_t next = body.find('\n', rows_end);
      rows_end = next == std::string_view::npos ? body.size() : next + 1;
    }
    const std::string_view rows = body.substr(0, rows_end);
    body.remove_prefix(rows_end);

    const std::vector<std::string_view> fields = Split(head, ' ');
    BatchSegment segment;
    const std::string_view kind = fields[0];
    const bool parted = kind == "#rows" || kind == "#truncate";
    const size_t wanted = parted ? 4 : kind == "#at" ? 3 : 0;
    const std::optional<int64_t> lsn =
        fields.size() == wanted ? ParseInt64(fields[1]) : std::nullopt;
    const std::optional<int64_t> part = parted && lsn ? ParseInt64(fields[2]) : 0;
    if (!lsn || *lsn <= 0 || !part || *part < 0 || fields.back().empty() ||
        (!rows.empty() && kind != "#rows")) {
      return InvalidArgument(fmt::format("bad segment '{}'", head.substr(0, 80)));
    }
    segment.kind = kind == "#rows"       ? BatchSegment::Kind::kRows
                   : kind == "#truncate" ? BatchSegment::Kind::kTruncate
                                         : BatchSegment::Kind::kAt;
    segment.lsn = *lsn;
    segment.part = *part;
    segment.sources = fields.back();
    segment.rows = rows;
    segments.push_back(segment);
  }
  return segments;
}

std::string EncodeGroupValues(std::span<const derived::KeyValue> values) {
  std::string body;
  for (const derived::KeyValue& item : values) {
    fmt::format_to(std::back_inserter(body), "{} {} ", item.key.size(), item.value);
    body.append(item.key);
    body.push_back('\n');
  }
  return body;
}

Result<std::vector<derived::KeyValue>> DecodeGroupValues(std::string_view body) {
  std::vector<derived::KeyValue> values;
  while (!body.empty()) {
    const size_t first = body.find(' ');
    const size_t second = first == std::string_view::npos ? first : body.find(' ', first + 1);
    if (second == std::string_view::npos) return InvalidArgument("a repair's group is cut short");
    const std::optional<int64_t> length = ParseInt64(body.substr(0, first));
    const std::optional<int64_t> value = ParseInt64(body.substr(first + 1, second - first - 1));
    const size_t key_at = second + 1;
    if (!length || !value || *length < 0 ||
        static_cast<uint64_t>(*length) >= body.size() - key_at ||
        body[key_at + static_cast<size_t>(*length)] != '\n') {
      return InvalidArgument(fmt::format("a repair's group is malformed: '{}'",
                                         body.substr(0, std::min<size_t>(body.size(), 80))));
    }
    values.push_back({std::string(body.substr(key_at, static_cast<size_t>(*length))), *value});
    body.remove_prefix(key_at + static_cast<size_t>(*length) + 1);
  }
  return values;
}

}  // namespace tally::cluster
