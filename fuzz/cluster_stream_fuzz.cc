// libFuzzer target for the decoders of what the cluster's other streams carry: a partition
// snapshot's manifest and chunks (cluster/snapshot_codec.h, the chunk's record through
// record_codec.h) and a source consumer's batch in the change stream (cluster/
// source_batch.h), the groups of tally verify's repair in the change stream (also
// source_batch.h) and the catalog snapshot (snapshot_codec.h). The first byte picks the
// decoder. Checked along the way: a refusal has a
// reason; a decoded manifest encodes to exactly its bytes; a chunk's prefix is what it came
// with; a parsed batch's segments are views inside the body, in order, and re-encoding their
// heads and rows gives the body back.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/record_codec.h"
#include "cluster/snapshot_codec.h"
#include "cluster/source_batch.h"
#include "fuzz_check.h"

namespace {

using namespace tally::cluster;
using tally::fuzz::Check;

void Manifest(std::string_view bytes) {
  auto decoded = DecodeManifest(bytes);
  if (!decoded) {
    Check(!decoded.error().message.empty(), "a refusal says why");
    return;
  }
  Check(EncodeManifest(*decoded) == bytes, "a manifest encodes to the bytes it came from");
  Check(decoded->chunks > 0 && decoded->last_seq >= decoded->first_seq, "its chunks fit");
}

void Chunk(std::string_view bytes) {
  auto decoded = DecodeChunk(bytes);
  if (!decoded) {
    Check(!decoded.error().message.empty(), "a refusal says why");
    return;
  }
  Check(EncodeChunkPrefix(decoded->id, decoded->index).size() + decoded->record.size() <=
            bytes.size(),
        "the record lies inside the chunk");
  Check(bytes.ends_with(decoded->record), "the record is the chunk's rest");
  (void)DecodeRecord(decoded->record);
}

void Batch(std::string_view body) {
  auto segments = ParseBatch(body);
  if (!segments) {
    Check(!segments.error().message.empty(), "a refusal says why");
    return;
  }
  std::string again;
  for (const BatchSegment& segment : *segments) {
    switch (segment.kind) {
      case BatchSegment::Kind::kRows:
        AppendRowsHead(segment.lsn, segment.part, segment.sources, &again);
        again += segment.rows;
        break;
      case BatchSegment::Kind::kTruncate:
        AppendTruncate(segment.lsn, segment.part, segment.sources, &again);
        break;
      case BatchSegment::Kind::kAt:
        AppendAt(segment.lsn, segment.sources, &again);
        break;
    }
  }
  // Numbers may be spelled more than one way (leading zeros): compare when they are not.
  if (again.size() == body.size()) Check(again == body, "a batch re-encodes to its body");
}

void Groups(std::string_view body) {
  auto values = DecodeGroupValues(body);
  if (!values) {
    Check(!values.error().message.empty(), "a refusal says why");
    return;
  }
  const std::string again = EncodeGroupValues(*values);
  if (again.size() == body.size()) Check(again == body, "a repair's groups re-encode to the body");
  auto twice = DecodeGroupValues(again);
  Check(twice && twice->size() == values->size(), "encoded groups decode again");
  for (size_t i = 0; twice && i < twice->size(); ++i) {
    Check((*twice)[i].key == (*values)[i].key && (*twice)[i].value == (*values)[i].value,
          "each group comes back as it was");
  }
}

void Catalog(std::string_view bytes) {
  auto snapshot = DecodeCatalogSnapshot(bytes);
  if (!snapshot) {
    Check(!snapshot.error().message.empty(), "a refusal says why");
    return;
  }
  const std::string again = EncodeCatalogSnapshot(*snapshot);
  Check(again == bytes, "a catalog snapshot encodes to the bytes it came from");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      Manifest(bytes);
      break;
    case 1:
      Chunk(bytes);
      break;
    case 2:
      Batch(bytes);
      break;
    default:  // both: text-like bodies
      Groups(bytes);
      Catalog(bytes);
      break;
  }
  return 0;
}
