// The body of a PostgreSQL source consumer's "batch" message in the cluster's change stream
// (change_feed.h): ClusterSourceTarget writes it, ChangeFeed reads it; the format lives here
// alone. A batch is a run of segments, each a head line, then (for rows) the rows:
//   "#rows <lsn> <part> <sources>\n" + rows, one JSON change per line (change_writer.h)
//   "#truncate <lsn> <part> <source>\n"
//   "#at <lsn> <sources>\n"                      positions alone
// <sources> is comma-separated; <lsn> the transaction's commit end LSN, <part> its part
// (from 1). A row never starts with '#' (a JSON change starts with '{').
//
// Also here: the body of tally verify's "repair" message, the groups to set, each
// "<key length> <value> <key>\n" (keys may hold any byte).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/derived/family.h"

namespace tally::cluster {

struct BatchSegment {
  enum class Kind : uint8_t { kRows, kTruncate, kAt };
  Kind kind = Kind::kRows;
  int64_t lsn = 0;
  int64_t part = 0;          // kRows, kTruncate
  std::string_view sources;  // comma-separated; kTruncate: its one source
  std::string_view rows;     // kRows: its lines, each ending in '\n'
};

void AppendRowsHead(int64_t lsn, int64_t part, std::string_view sources, std::string* out);
void AppendTruncate(int64_t lsn, int64_t part, std::string_view source, std::string* out);
void AppendAt(int64_t lsn, std::string_view sources, std::string* out);

// The segments of `body`, views of it; kInvalidArgument naming the first bad head (nothing
// of a bad batch is to be applied).
Result<std::vector<BatchSegment>> ParseBatch(std::string_view body);

// A repair's groups, and back; kInvalidArgument for a body that is not such a run.
std::string EncodeGroupValues(std::span<const derived::KeyValue> values);
Result<std::vector<derived::KeyValue>> DecodeGroupValues(std::string_view body);

// The parts of `text` between `separator`s, at least one (empty text: one empty part).
std::vector<std::string_view> Split(std::string_view text, char separator);

}  // namespace tally::cluster
