// The byte form of a partition stream's record (one NATS message body):
//
//   record    := magic kind header body crc
//   magic     := "TLB1"
//   kind      := u8: 1 batch, 2 claim, 3 renew, 4 part of a group (its last record is a batch)
//   header    := partition:varint term:varint writer:u64-le epoch:varint owner-unix-ms:i64-le
//   body      := batch-body (kinds 1, 4) | claim-body (kind 2) | nothing (kind 3)
//   batch-body:= flags:u8 delete-count:varint delete* put-count:varint put*
//   flags     := bit 0 set = clear every counter of the partition first (FLUSHALL); the other
//                bits are 0
//   delete    := key
//   put       := key value:zigzag-varint deadline-ms:varint (Unix milliseconds, 0 = none)
//   claim-body:= node-name:string node-id:string redis-address:string http-address:string
//                caught-up-to:varint previous-term:varint
//   key       := string
//   string    := length:varint bytes
//   crc       := u32-le, CRC-32C of every byte before it
//
// varint is LEB128 (7 bits a byte, least significant first, at most 10 bytes); zigzag maps
// 0, -1, 1, -2 ... to 0, 1, 2, 3 ... so that small negative values stay short. A batch
// applies in order: clear, deletes, puts. Values are final values, not deltas: applying a
// batch twice, or over tables that already reflect it, leaves the same state.
#include "cluster/record_codec.h"

#include <cstring>

#include "core/crc32c.h"

namespace tally::cluster {
namespace {

constexpr std::string_view kMagic = "TLB1";
constexpr uint8_t kFlagClear = 1;

// Appends the grammar's primitives to a string.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) { out_->clear(); }

  void U8(uint8_t value) { out_->push_back(static_cast<char>(value)); }
  void Varint(uint64_t value) {
    while (value >= 0x80) {
      U8(static_cast<uint8_t>(value | 0x80));
      value >>= 7;
    }
    U8(static_cast<uint8_t>(value));
  }
  void ZigZag(int64_t value) {
    Varint((static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63));
  }
  void LittleEndian(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) U8(static_cast<uint8_t>(value >> (8 * i)));
  }
  void String(std::string_view bytes) {
    Varint(bytes.size());
    out_->append(bytes);
  }
  void Raw(std::string_view bytes) { out_->append(bytes); }
  // Appends the checksum of everything written so far: the record is complete.
  void Seal() { LittleEndian(Crc32c(out_->data(), out_->size()), 4); }

 private:
  std::string* out_;
};

// Reads the grammar's primitives. A read past the end or a malformed varint makes the
// reader fail for good (ok() false) and every later read return zero, so that a decoder
// checks once per record part instead of after every field.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}

  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && position_ == bytes_.size(); }

  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(bytes_[position_++]);
  }
  uint64_t Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 70 && ok_; shift += 7) {
      const uint8_t byte = U8();
      if (shift == 63 && byte > 1) break;  // more than 64 bits
      value |= uint64_t{byte & 0x7Fu} << shift;
      if ((byte & 0x80) == 0) return value;
    }
    ok_ = false;
    return 0;
  }
  int64_t ZigZag() {
    const uint64_t encoded = Varint();
    return static_cast<int64_t>((encoded >> 1) ^ (~(encoded & 1) + 1));
  }
  uint64_t LittleEndian(int bytes) {
    uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value |= uint64_t{U8()} << (8 * i);
    return value;
  }
  std::string_view String() {
    const uint64_t length = Varint();
    if (!Need(length)) return {};
    const std::string_view bytes = bytes_.substr(position_, length);
    position_ += length;
    return bytes;
  }

 private:
  bool Need(uint64_t count) {
    if (ok_ && bytes_.size() - position_ >= count) return true;
    ok_ = false;
    return false;
  }

  std::string_view bytes_;
  size_t position_ = 0;
  bool ok_ = true;
};

void WriteHeader(Writer& writer, RecordKind kind, const RecordHeader& header) {
  writer.Raw(kMagic);
  writer.U8(static_cast<uint8_t>(kind));
  writer.Varint(header.partition);
  writer.Varint(header.term);
  writer.LittleEndian(header.writer, 8);
  writer.Varint(header.epoch);
  writer.LittleEndian(static_cast<uint64_t>(header.owner_unix_ms), 8);
}

Status DecodeBatchBody(Cursor& in, engine::CommitBatch* batch) {
  const uint8_t flags = in.U8();
  if (!in.ok() || (flags & ~kFlagClear) != 0) return Corruption("cluster record: bad batch flags");
  if (flags & kFlagClear) batch->ClearAll();
  const uint64_t deletes = in.Varint();
  for (uint64_t i = 0; i < deletes && in.ok(); ++i) {
    const std::string_view key = in.String();
    if (in.ok()) batch->AddDelete(key);
  }
  const uint64_t puts = in.Varint();
  for (uint64_t i = 0; i < puts && in.ok(); ++i) {
    const std::string_view key = in.String();
    const int64_t value = in.ZigZag();
    const auto deadline = static_cast<int64_t>(in.Varint());
    if (in.ok()) batch->AddPut(key, engine::CounterRecord{value, deadline});
  }
  if (!in.ok()) return Corruption("cluster record: truncated batch");
  return OkStatus();
}

Status DecodeClaimBody(Cursor& in, ClaimBody* claim) {
  claim->node_name = in.String();
  claim->node_id = in.String();
  claim->redis_address = in.String();
  claim->http_address = in.String();
  claim->caught_up_to = in.Varint();
  claim->previous_term = in.Varint();
  if (!in.ok()) return Corruption("cluster record: truncated claim");
  return OkStatus();
}

}  // namespace

std::string_view RecordKindName(RecordKind kind) {
  switch (kind) {
    case RecordKind::kBatch:
      return "batch";
    case RecordKind::kClaim:
      return "claim";
    case RecordKind::kRenew:
      return "renew";
    case RecordKind::kPart:
      return "part";
  }
  return "unknown";
}

BatchShare BatchShare::All(const engine::CommitBatch& batch) {
  BatchShare share;
  share.clear = batch.clear_all();
  for (size_t i = 0; i < batch.delete_count(); ++i) share.deletes.push_back(i);
  for (size_t i = 0; i < batch.put_count(); ++i) share.puts.push_back(i);
  return share;
}

std::vector<BatchShare> SplitBatch(const engine::CommitBatch& batch, uint32_t partition_count) {
  std::vector<BatchShare> shares(partition_count);
  for (BatchShare& share : shares) share.clear = batch.clear_all();
  for (size_t i = 0; i < batch.delete_count(); ++i) {
    shares[SlotPartition(KeySlot(batch.delete_key(i)), partition_count)].deletes.push_back(i);
  }
  for (size_t i = 0; i < batch.put_count(); ++i) {
    shares[SlotPartition(KeySlot(batch.put_key(i)), partition_count)].puts.push_back(i);
  }
  return shares;
}

void EncodeBatch(const RecordHeader& header, const engine::CommitBatch& batch,
                 const BatchShare& share, std::string* out, RecordKind kind) {
  Writer writer(out);
  WriteHeader(writer, kind, header);
  writer.U8(share.clear ? kFlagClear : 0);
  writer.Varint(share.deletes.size());
  for (const uint32_t i : share.deletes) writer.String(batch.delete_key(i));
  writer.Varint(share.puts.size());
  for (const uint32_t i : share.puts) {
    writer.String(batch.put_key(i));
    const engine::CounterRecord& record = batch.put_record(i);
    writer.ZigZag(record.value);
    writer.Varint(static_cast<uint64_t>(record.deadline_ms));
  }
  writer.Seal();
}

void EncodeClaim(const RecordHeader& header, const ClaimBody& claim, std::string* out) {
  Writer writer(out);
  WriteHeader(writer, RecordKind::kClaim, header);
  writer.String(claim.node_name);
  writer.String(claim.node_id);
  writer.String(claim.redis_address);
  writer.String(claim.http_address);
  writer.Varint(claim.caught_up_to);
  writer.Varint(claim.previous_term);
  writer.Seal();
}

void EncodeRenew(const RecordHeader& header, std::string* out) {
  Writer writer(out);
  WriteHeader(writer, RecordKind::kRenew, header);
  writer.Seal();
}

Result<Record> DecodeRecord(std::string_view bytes) {
  if (bytes.size() < kMagic.size() + 1 + 4 || bytes.substr(0, kMagic.size()) != kMagic) {
    return Corruption("cluster record: not a tally record");
  }
  const std::string_view content = bytes.substr(0, bytes.size() - 4);
  Cursor trailer(bytes.substr(content.size()));
  if (trailer.LittleEndian(4) != Crc32c(content.data(), content.size())) {
    return Corruption("cluster record: checksum mismatch");
  }
  Cursor in(content.substr(kMagic.size()));
  Record record;
  const uint8_t kind = in.U8();
  const uint64_t partition = in.Varint();
  record.header.term = in.Varint();
  record.header.writer = in.LittleEndian(8);
  record.header.epoch = in.Varint();
  record.header.owner_unix_ms = static_cast<int64_t>(in.LittleEndian(8));
  if (!in.ok() || partition >= kMaxPartitions) return Corruption("cluster record: bad header");
  record.header.partition = static_cast<uint32_t>(partition);
  Status body = OkStatus();
  switch (kind) {
    case static_cast<uint8_t>(RecordKind::kBatch):
    case static_cast<uint8_t>(RecordKind::kPart):
      record.kind = static_cast<RecordKind>(kind);
      record.batch.set_epoch(record.header.epoch);
      body = DecodeBatchBody(in, &record.batch);
      break;
    case static_cast<uint8_t>(RecordKind::kClaim):
      record.kind = RecordKind::kClaim;
      body = DecodeClaimBody(in, &record.claim);
      break;
    case static_cast<uint8_t>(RecordKind::kRenew):
      record.kind = RecordKind::kRenew;
      break;
    default:
      return Corruption("cluster record: unknown kind " + std::to_string(kind));
  }
  if (!body) return tl::unexpected(body.error());
  if (!in.at_end()) return Corruption("cluster record: trailing bytes");
  return record;
}

bool OwnershipFilter::Accept(uint64_t seq, const Record& record) {
  if (record.kind == RecordKind::kClaim) {
    if (record.header.term != seq || record.header.writer == 0) return false;
    term_ = record.header.term;
    writer_ = record.header.writer;
    return true;
  }
  return term_ != 0 && record.header.term == term_ && record.header.writer == writer_;
}

}  // namespace tally::cluster
