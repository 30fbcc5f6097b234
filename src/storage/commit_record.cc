#include "storage/commit_record.h"

#include <cstring>

namespace tally::storage {
namespace {

void PutVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutFixed64(std::string* out, uint64_t value) {
  char bytes[8];
  std::memcpy(bytes, &value, 8);
  out->append(bytes, 8);
}

// Reads from a payload, refusing to run past its end.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}

  bool Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ >= bytes_.size()) return false;
      const auto byte = static_cast<uint8_t>(bytes_[position_++]);
      *value |= uint64_t{byte & 0x7Fu} << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  bool Fixed64(uint64_t* value) {
    if (bytes_.size() - position_ < 8) return false;
    std::memcpy(value, bytes_.data() + position_, 8);
    position_ += 8;
    return true;
  }
  bool Byte(uint8_t* value) {
    if (position_ >= bytes_.size()) return false;
    *value = static_cast<uint8_t>(bytes_[position_++]);
    return true;
  }
  bool Bytes(std::string_view* value) {
    uint64_t length;
    if (!Varint(&length) || bytes_.size() - position_ < length) return false;
    *value = bytes_.substr(position_, length);
    position_ += length;
    return true;
  }
  bool done() const { return position_ == bytes_.size(); }

 private:
  std::string_view bytes_;
  size_t position_ = 0;
};

}  // namespace

void EncodeCommit(const engine::CommitBatch& batch, std::string* out) {
  out->clear();
  PutFixed64(out, batch.epoch());
  out->push_back(batch.clear_all() ? 1 : 0);
  PutVarint(out, batch.delete_count());
  for (size_t i = 0; i < batch.delete_count(); ++i) {
    const std::string_view key = batch.delete_key(i);
    PutVarint(out, key.size());
    out->append(key);
  }
  PutVarint(out, batch.put_count());
  for (size_t i = 0; i < batch.put_count(); ++i) {
    const std::string_view key = batch.put_key(i);
    PutVarint(out, key.size());
    out->append(key);
    const engine::CounterRecord& record = batch.put_record(i);
    PutFixed64(out, static_cast<uint64_t>(record.value));
    PutFixed64(out, static_cast<uint64_t>(record.deadline_ms));
  }
}

Status DecodeCommit(std::string_view payload, engine::LoadVisitor& visitor) {
  Reader reader(payload);
  uint64_t epoch;
  uint8_t flags;
  uint64_t count;
  if (!reader.Fixed64(&epoch) || !reader.Byte(&flags) || !reader.Varint(&count)) {
    return Corruption("commit record: bad header");
  }
  if (flags & 1) visitor.ClearAll(engine::LoadSource::kLog);
  for (uint64_t i = 0; i < count; ++i) {
    std::string_view key;
    if (!reader.Bytes(&key)) return Corruption("commit record: bad delete");
    visitor.Delete(key, engine::LoadSource::kLog);
  }
  if (!reader.Varint(&count)) return Corruption("commit record: bad put count");
  for (uint64_t i = 0; i < count; ++i) {
    std::string_view key;
    uint64_t value;
    uint64_t deadline;
    if (!reader.Bytes(&key) || !reader.Fixed64(&value) || !reader.Fixed64(&deadline)) {
      return Corruption("commit record: bad put");
    }
    visitor.Put(key,
                engine::CounterRecord{static_cast<int64_t>(value), static_cast<int64_t>(deadline)},
                engine::LoadSource::kLog);
  }
  if (!reader.done()) return Corruption("commit record: trailing bytes");
  return OkStatus();
}

}  // namespace tally::storage
