// The byte formats decoded here, from PostgreSQL's "Streaming Replication Protocol" and
// "Logical Replication Message Formats" (protocol chapter, PostgreSQL 15). IntN is a
// big-endian signed or unsigned integer of N bits, String is NUL-terminated bytes.
//
//   copy_data   := 'w' Int64 wal_start Int64 wal_end Int64 send_time Byte* payload
//                | 'k' Int64 wal_end Int64 send_time Int8 reply_requested
//   status      := 'r' Int64 write Int64 flush Int64 apply Int64 client_time Int8 reply
//
//   message     := 'B' Int64 final_lsn Int64 commit_time Int32 xid
//                | 'C' Int8 flags Int64 commit_lsn Int64 end_lsn Int64 commit_time
//                | 'O' Int64 origin_commit_lsn String name
//                | 'R' Int32 oid String namespace String name Int8 replica_identity
//                      Int16 ncolumns ( Int8 flags String name Int32 type_oid
//                                       Int32 type_modifier ){ncolumns}
//                | 'Y' Int32 oid String namespace String name
//                | 'I' Int32 oid 'N' tuple
//                | 'U' Int32 oid [ ('K' | 'O') tuple ] 'N' tuple
//                | 'D' Int32 oid ('K' | 'O') tuple
//                | 'T' Int32 nrelations Int8 options Int32 oid{nrelations}
//                | 'M' Int8 transactional Int64 lsn String prefix Int32 n Byte{n}
//   tuple       := Int16 ncolumns cell{ncolumns}
//   cell        := 'n' | 'u' | 't' Int32 n Byte{n}        ('b' is refused)
//
// A message must be consumed exactly: trailing bytes are corruption too.
#include "sources/postgres/pgoutput.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>

namespace tally::postgres {
namespace {

// Reads big-endian fields from a span. The first failure is kept and every later read
// returns zero or empty, so a decoder can read a whole message and look once at the end
// (loops check ok() to stop early).
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const char* what) : bytes_(bytes), what_(what) {}

  bool ok() const { return error_field_ == nullptr; }
  size_t offset() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  uint8_t U8(const char* field) {
    if (!Need(1, field)) return 0;
    return bytes_[pos_++];
  }
  uint16_t U16(const char* field) { return static_cast<uint16_t>(Big(2, field)); }
  uint32_t U32(const char* field) { return static_cast<uint32_t>(Big(4, field)); }
  uint64_t U64(const char* field) { return Big(8, field); }
  int32_t I32(const char* field) { return static_cast<int32_t>(U32(field)); }
  int64_t I64(const char* field) { return static_cast<int64_t>(U64(field)); }

  // A NUL-terminated string; the terminator is consumed, not returned.
  std::string_view CString(const char* field) {
    if (!ok()) return {};
    for (size_t i = pos_; i < bytes_.size(); ++i) {
      if (bytes_[i] == 0) {
        std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), i - pos_);
        pos_ = i + 1;
        return s;
      }
    }
    Fail(field, "no terminating NUL");
    return {};
  }

  std::span<const uint8_t> Bytes(size_t n, const char* field) {
    if (!Need(n, field)) return {};
    auto s = bytes_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

  // Records a failure at `at` (default: the current offset). The first one wins.
  void Fail(const char* field, std::string detail, size_t at = SIZE_MAX) {
    if (!ok()) return;
    error_field_ = field;
    error_offset_ = at == SIZE_MAX ? pos_ : at;
    error_detail_ = std::move(detail);
  }

  // The error, if any read failed or bytes remain when `exact`.
  Status Finish(bool exact = true) {
    if (ok() && exact && pos_ != bytes_.size()) {
      Fail("the end of the message", fmt::format("{} trailing bytes", remaining()));
    }
    if (ok()) return OkStatus();
    return Corruption(fmt::format("malformed {}: at byte {} of {}, reading {}: {}", what_,
                                  error_offset_, bytes_.size(), error_field_, error_detail_));
  }

 private:
  bool Need(size_t n, const char* field) {
    if (!ok()) return false;
    if (remaining() < n) {
      Fail(field, fmt::format("truncated, {} bytes needed and {} left", n, remaining()));
      return false;
    }
    return true;
  }
  uint64_t Big(size_t n, const char* field) {
    if (!Need(n, field)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | bytes_[pos_ + i];
    pos_ += n;
    return v;
  }

  std::span<const uint8_t> bytes_;
  const char* what_;
  size_t pos_ = 0;
  const char* error_field_ = nullptr;
  size_t error_offset_ = 0;
  std::string error_detail_;
};

// The smallest encoding of one tuple cell ('n' or 'u'), to bound reserve() by the bytes
// actually present rather than by a count read from the wire.
constexpr size_t kMinCellBytes = 1;
// The smallest encoding of one Relation column: flags, "" name, type oid, typmod.
constexpr size_t kMinRelationColumnBytes = 1 + 1 + 4 + 4;

void ReadTuple(Reader& in, Tuple* tuple) {
  const uint16_t n = in.U16("the tuple's column count");
  tuple->cells.clear();
  tuple->cells.reserve(std::min<size_t>(n, in.remaining() / kMinCellBytes));
  for (uint16_t i = 0; i < n && in.ok(); ++i) {
    const size_t at = in.offset();
    const uint8_t kind = in.U8("a tuple cell's kind");
    if (!in.ok()) break;
    TupleCell cell;
    switch (kind) {
      case 'n':
        cell.kind = TupleCell::Kind::kNull;
        break;
      case 'u':
        cell.kind = TupleCell::Kind::kUnchangedToast;
        break;
      case 't': {
        cell.kind = TupleCell::Kind::kText;
        const uint32_t len = in.U32("a text cell's length");
        auto bytes = in.Bytes(len, "a text cell's bytes");
        cell.text = std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        break;
      }
      case 'b':
        in.Fail("a tuple cell's kind",
                fmt::format("column {} is in binary format ('b'); only text is supported", i), at);
        break;
      default:
        in.Fail("a tuple cell's kind", fmt::format("unknown kind 0x{:02x} of column {}", kind, i),
                at);
        break;
    }
    tuple->cells.push_back(cell);
  }
}

// Checks the tag just read before a new tuple.
void ReadNewTupleTag(Reader& in, uint8_t tag) {
  if (in.ok() && tag != 'N') {
    in.Fail("the new tuple's tag", fmt::format("0x{:02x} is not 'N'", tag), in.offset() - 1);
  }
}

OldTupleKind OldKindOf(uint8_t tag) {
  switch (tag) {
    case 'K':
      return OldTupleKind::kKey;
    case 'O':
      return OldTupleKind::kFull;
    default:
      return OldTupleKind::kNone;
  }
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

void PutBig(uint64_t v, int n, std::string* out) {
  for (int i = n - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

Result<Message> DecodeBody(uint8_t type, Reader& in) {
  switch (type) {
    case 'B': {
      BeginMessage m;
      m.final_lsn = in.U64("the final LSN");
      m.commit_time = in.I64("the commit timestamp");
      m.xid = in.U32("the xid");
      return m;
    }
    case 'C': {
      CommitMessage m;
      m.flags = in.U8("the flags");
      m.commit_lsn = in.U64("the commit LSN");
      m.end_lsn = in.U64("the end LSN");
      m.commit_time = in.I64("the commit timestamp");
      return m;
    }
    case 'O': {
      OriginMessage m;
      m.origin_commit_lsn = in.U64("the origin's commit LSN");
      m.name = in.CString("the origin name");
      return m;
    }
    case 'R': {
      RelationMessage m;
      m.oid = in.U32("the relation oid");
      m.namespace_name = in.CString("the namespace");
      m.name = in.CString("the relation name");
      m.replica_identity = static_cast<char>(in.U8("the replica identity"));
      const uint16_t n = in.U16("the column count");
      m.columns.reserve(std::min<size_t>(n, in.remaining() / kMinRelationColumnBytes));
      for (uint16_t i = 0; i < n && in.ok(); ++i) {
        RelationMessage::Column c;
        c.is_key = (in.U8("a column's flags") & 1) != 0;
        c.name = in.CString("a column name");
        c.type_oid = in.U32("a column's type oid");
        c.type_modifier = in.I32("a column's type modifier");
        m.columns.push_back(std::move(c));
      }
      return m;
    }
    case 'Y': {
      TypeMessage m;
      m.oid = in.U32("the type oid");
      m.namespace_name = in.CString("the namespace");
      m.name = in.CString("the type name");
      return m;
    }
    case 'I': {
      InsertMessage m;
      m.relation_oid = in.U32("the relation oid");
      ReadNewTupleTag(in, in.U8("the new tuple's tag"));
      ReadTuple(in, &m.new_tuple);
      return m;
    }
    case 'U': {
      UpdateMessage m;
      m.relation_oid = in.U32("the relation oid");
      uint8_t tag = in.U8("a tuple tag");
      m.old_kind = OldKindOf(tag);
      if (in.ok() && m.old_kind != OldTupleKind::kNone) {
        ReadTuple(in, &m.old_tuple);
        tag = in.U8("the new tuple's tag");
      }
      ReadNewTupleTag(in, tag);
      ReadTuple(in, &m.new_tuple);
      return m;
    }
    case 'D': {
      DeleteMessage m;
      m.relation_oid = in.U32("the relation oid");
      const uint8_t tag = in.U8("the old tuple's tag");
      m.old_kind = OldKindOf(tag);
      if (in.ok() && m.old_kind == OldTupleKind::kNone) {
        in.Fail("the old tuple's tag", fmt::format("0x{:02x} is neither 'K' nor 'O'", tag),
                in.offset() - 1);
      }
      ReadTuple(in, &m.old_tuple);
      return m;
    }
    case 'T': {
      TruncateMessage m;
      const uint32_t n = in.U32("the relation count");
      m.options = in.U8("the options");
      if (in.ok() && n > in.remaining() / 4) {
        in.Fail("the relation oids",
                fmt::format("truncated, {} relations need {} bytes and {} are left", n,
                            uint64_t{n} * 4, in.remaining()));
      }
      if (in.ok()) m.relation_oids.reserve(n);
      for (uint32_t i = 0; i < n && in.ok(); ++i)
        m.relation_oids.push_back(in.U32("a relation oid"));
      return m;
    }
    case 'M': {
      LogicalMessage m;
      m.transactional = (in.U8("the flags") & 1) != 0;
      m.lsn = in.U64("the message LSN");
      m.prefix = in.CString("the prefix");
      const uint32_t n = in.U32("the content length");
      m.content = in.Bytes(n, "the content");
      return m;
    }
    default:
      return Corruption(fmt::format(
          "unknown pgoutput message type 0x{:02x} at byte 0 (protocol version 1 expected)", type));
  }
}

}  // namespace

int64_t PgMicrosToUnixMicros(int64_t pg_micros) {
  return SaturatingAdd(pg_micros, kPgEpochUnixMicros);
}

int64_t UnixMicrosToPgMicros(int64_t unix_micros) {
  return SaturatingAdd(unix_micros, -kPgEpochUnixMicros);
}

Result<CopyDataMessage> DecodeCopyData(std::span<const uint8_t> frame) {
  if (frame.empty()) return Corruption("malformed replication CopyData: empty frame");
  switch (frame[0]) {
    case 'w': {
      Reader in(frame, "XLogData frame");
      in.U8("the frame type");
      XLogData m;
      m.wal_start = in.U64("the WAL start");
      m.wal_end = in.U64("the WAL end");
      m.send_time = in.I64("the send time");
      m.payload = in.Bytes(in.remaining(), "the payload");
      if (auto s = in.Finish(); !s) return tl::unexpected(s.error());
      return m;
    }
    case 'k': {
      Reader in(frame, "primary keepalive frame");
      in.U8("the frame type");
      PrimaryKeepalive m;
      m.wal_end = in.U64("the WAL end");
      m.send_time = in.I64("the send time");
      m.reply_requested = in.U8("the reply flag") != 0;
      if (auto s = in.Finish(); !s) return tl::unexpected(s.error());
      return m;
    }
    default:
      return Corruption(
          fmt::format("malformed replication CopyData: unknown frame type 0x{:02x} at byte 0 "
                      "('w' XLogData or 'k' keepalive expected)",
                      frame[0]));
  }
}

std::string EncodeStandbyStatusUpdate(const StandbyStatusUpdate& update) {
  std::string out;
  out.reserve(34);
  out.push_back('r');
  PutBig(update.write, 8, &out);
  PutBig(update.flush, 8, &out);
  PutBig(update.apply, 8, &out);
  PutBig(static_cast<uint64_t>(update.client_time), 8, &out);
  out.push_back(update.reply_requested ? 1 : 0);
  return out;
}

std::string RelationMessage::QualifiedName() const {
  return namespace_name.empty() ? name : namespace_name + "." + name;
}

const char* MessageName(uint8_t type) {
  switch (type) {
    case 'B':
      return "Begin";
    case 'C':
      return "Commit";
    case 'O':
      return "Origin";
    case 'R':
      return "Relation";
    case 'Y':
      return "Type";
    case 'I':
      return "Insert";
    case 'U':
      return "Update";
    case 'D':
      return "Delete";
    case 'T':
      return "Truncate";
    case 'M':
      return "Message";
    default:
      return nullptr;
  }
}

Result<Message> DecodeMessage(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return Corruption("malformed pgoutput message: empty");
  const char* name = MessageName(bytes[0]);
  if (name == nullptr) {
    const uint8_t t = bytes[0];
    const bool printable = t >= 0x20 && t < 0x7f;
    return Corruption(fmt::format(
        "unknown pgoutput message type {}0x{:02x} at byte 0 (protocol version 1: B C O R Y "
        "I U D T M)",
        printable ? fmt::format("'{}' ", static_cast<char>(t)) : std::string(), t));
  }
  const std::string what = fmt::format("pgoutput {} message", name);
  Reader in(bytes, what.c_str());
  const uint8_t type = in.U8("the message type");
  Result<Message> m = DecodeBody(type, in);
  if (auto s = in.Finish(); !s) return tl::unexpected(s.error());
  return m;
}

}  // namespace tally::postgres
