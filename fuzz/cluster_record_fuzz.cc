// libFuzzer target for the decoder of a partition stream's records (cluster/record_codec.h),
// which reads whatever a NATS stream holds. The input is tried twice: as a whole record,
// and as a record's content with its checksum appended here (so that the fuzzer explores
// the grammar instead of stopping at the CRC). Checked along the way: a refusal is
// kCorruption with a reason; a decoded record encodes again to bytes that decode to the
// same record (the encoder writes the shortest varints, the decoder also reads longer
// ones, so the bytes themselves may differ).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/record_codec.h"
#include "core/crc32c.h"
#include "fuzz_check.h"

namespace {

using tally::cluster::Record;
using tally::cluster::RecordKind;
using tally::fuzz::Check;

bool SameHeader(const tally::cluster::RecordHeader& a, const tally::cluster::RecordHeader& b) {
  return a.partition == b.partition && a.term == b.term && a.writer == b.writer &&
         a.epoch == b.epoch && a.owner_unix_ms == b.owner_unix_ms;
}

bool SameBatch(const tally::engine::CommitBatch& a, const tally::engine::CommitBatch& b) {
  if (a.clear_all() != b.clear_all() || a.delete_count() != b.delete_count() ||
      a.put_count() != b.put_count()) {
    return false;
  }
  for (size_t i = 0; i < a.delete_count(); ++i) {
    if (a.delete_key(i) != b.delete_key(i)) return false;
  }
  for (size_t i = 0; i < a.put_count(); ++i) {
    if (a.put_key(i) != b.put_key(i) || a.put_record(i).value != b.put_record(i).value ||
        a.put_record(i).deadline_ms != b.put_record(i).deadline_ms) {
      return false;
    }
  }
  return true;
}

bool SameClaim(const tally::cluster::ClaimBody& a, const tally::cluster::ClaimBody& b) {
  return a.node_name == b.node_name && a.node_id == b.node_id &&
         a.redis_address == b.redis_address && a.http_address == b.http_address &&
         a.caught_up_to == b.caught_up_to && a.previous_term == b.previous_term;
}

void Try(std::string_view bytes) {
  const tally::Result<Record> record = tally::cluster::DecodeRecord(bytes);
  if (!record) {
    Check(record.error().code == tally::ErrorCode::kCorruption, "a refusal is kCorruption");
    Check(!record.error().message.empty(), "a refusal says why");
    return;
  }
  std::string encoded;
  switch (record->kind) {
    case RecordKind::kBatch:
    case RecordKind::kPart:
      tally::cluster::EncodeBatch(record->header, record->batch,
                                  tally::cluster::BatchShare::All(record->batch), &encoded,
                                  record->kind);
      break;
    case RecordKind::kClaim:
      tally::cluster::EncodeClaim(record->header, record->claim, &encoded);
      break;
    case RecordKind::kRenew:
      tally::cluster::EncodeRenew(record->header, &encoded);
      break;
  }
  Check(encoded.size() <= bytes.size(), "the encoder writes no more than it read");
  const tally::Result<Record> again = tally::cluster::DecodeRecord(encoded);
  Check(again.has_value(), "a decoded record encodes to a decodable one");
  Check(again->kind == record->kind, "the kind survives");
  Check(SameHeader(again->header, record->header), "the header survives");
  Check((record->kind != RecordKind::kBatch && record->kind != RecordKind::kPart) ||
            SameBatch(again->batch, record->batch),
        "the batch survives");
  Check(record->kind != RecordKind::kClaim || SameClaim(again->claim, record->claim),
        "the claim survives");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Try(input);
  std::string sealed(input);
  const uint32_t crc = tally::Crc32c(sealed.data(), sealed.size());
  for (int i = 0; i < 4; ++i) sealed.push_back(static_cast<char>(crc >> (8 * i)));
  Try(sealed);
  return 0;
}
