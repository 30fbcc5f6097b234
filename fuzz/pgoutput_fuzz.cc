// libFuzzer target for PostgreSQL logical replication as tally reads it: the input is one
// CopyData payload of the walsender ('w' XLogData, 'k' keepalive) and, just as well, one
// pgoutput message (an XLogData's payload is decoded as one too). Properties:
//   - an error is kCorruption and names what was being decoded;
//   - a decoded message written again (by the encoder below, from the grammar at the top of
//     pgoutput.cc) has the input's length and decodes to a message that writes the same
//     bytes (flag bits the decoder does not keep are the only bytes that may differ);
//   - a Relation maps onto a source or says which column does not fit;
//   - a tuple read through a relation of as many columns, of every type tally reads, gives
//     a row whose cells are NULL or of their column's type (text cells as sent), or an
//     error naming the table and column; an unchanged TOAST cell is taken from the old row.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fuzz_check.h"
#include "sources/postgres/pg_types.h"
#include "sources/postgres/pgoutput.h"

namespace tally::postgres {
namespace {

using definitions::SourceSchema;
using definitions::Type;
using definitions::Value;
using fuzz::Check;

std::span<const uint8_t> Bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// The writer of the grammar at the top of pgoutput.cc.
class Writer {
 public:
  void U8(uint64_t v) { Big(v, 1); }
  void U16(uint64_t v) { Big(v, 2); }
  void U32(uint64_t v) { Big(v, 4); }
  void U64(uint64_t v) { Big(v, 8); }
  void CString(std::string_view s) {
    out_.append(s);
    out_.push_back('\0');
  }
  void Raw(std::string_view s) { out_.append(s); }
  void Tuple(const postgres::Tuple& tuple) {
    U16(tuple.cells.size());
    for (const TupleCell& cell : tuple.cells) {
      U8(static_cast<uint8_t>(cell.kind));
      if (cell.kind != TupleCell::Kind::kText) continue;
      U32(cell.text.size());
      Raw(cell.text);
    }
  }
  const std::string& bytes() const { return out_; }

 private:
  void Big(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

std::string Encode(const Message& message) {
  Writer w;
  if (const auto* m = std::get_if<BeginMessage>(&message)) {
    w.U8('B');
    w.U64(m->final_lsn);
    w.U64(m->commit_time);
    w.U32(m->xid);
  } else if (const auto* m = std::get_if<CommitMessage>(&message)) {
    w.U8('C');
    w.U8(m->flags);
    w.U64(m->commit_lsn);
    w.U64(m->end_lsn);
    w.U64(m->commit_time);
  } else if (const auto* m = std::get_if<OriginMessage>(&message)) {
    w.U8('O');
    w.U64(m->origin_commit_lsn);
    w.CString(m->name);
  } else if (const auto* m = std::get_if<RelationMessage>(&message)) {
    w.U8('R');
    w.U32(m->oid);
    w.CString(m->namespace_name);
    w.CString(m->name);
    w.U8(static_cast<uint8_t>(m->replica_identity));
    w.U16(m->columns.size());
    for (const RelationMessage::Column& c : m->columns) {
      w.U8(c.is_key ? 1 : 0);
      w.CString(c.name);
      w.U32(c.type_oid);
      w.U32(static_cast<uint32_t>(c.type_modifier));
    }
  } else if (const auto* m = std::get_if<TypeMessage>(&message)) {
    w.U8('Y');
    w.U32(m->oid);
    w.CString(m->namespace_name);
    w.CString(m->name);
  } else if (const auto* m = std::get_if<InsertMessage>(&message)) {
    w.U8('I');
    w.U32(m->relation_oid);
    w.U8('N');
    w.Tuple(m->new_tuple);
  } else if (const auto* m = std::get_if<UpdateMessage>(&message)) {
    w.U8('U');
    w.U32(m->relation_oid);
    if (m->old_kind != OldTupleKind::kNone) {
      w.U8(static_cast<uint8_t>(m->old_kind));
      w.Tuple(m->old_tuple);
    }
    w.U8('N');
    w.Tuple(m->new_tuple);
  } else if (const auto* m = std::get_if<DeleteMessage>(&message)) {
    w.U8('D');
    w.U32(m->relation_oid);
    w.U8(static_cast<uint8_t>(m->old_kind));
    w.Tuple(m->old_tuple);
  } else if (const auto* m = std::get_if<TruncateMessage>(&message)) {
    w.U8('T');
    w.U32(m->relation_oids.size());
    w.U8(m->options);
    for (const uint32_t oid : m->relation_oids) w.U32(oid);
  } else if (const auto* m = std::get_if<LogicalMessage>(&message)) {
    w.U8('M');
    w.U8(m->transactional ? 1 : 0);
    w.U64(m->lsn);
    w.CString(m->prefix);
    w.U32(m->content.size());
    w.Raw({reinterpret_cast<const char*>(m->content.data()), m->content.size()});
  }
  return w.bytes();
}

void CheckCorruption(const Error& error, std::string_view what) {
  Check(error.code == ErrorCode::kCorruption, "undecodable bytes are kCorruption", error.message);
  Check(error.message.starts_with(what) || error.message.starts_with("unknown pgoutput"),
        "an error names what was decoded", error.message);
}

// The types tally reads; relation column i has kTypes[i % size].
constexpr uint32_t kTypes[] = {kInt8Oid, kInt4Oid, kInt2Oid,      kNumericOid,
                               kBoolOid, kTextOid, kVarcharOid,   kBpcharOid,
                               kNameOid, kDateOid, kTimestampOid, kTimestamptzOid};

// A relation of `width` columns c0, c1, ... of kTypes, and a source of the same columns.
struct Table {
  RelationMessage relation;
  SourceSchema schema;
};

Table MakeTable(size_t width) {
  Table table;
  table.relation.oid = 16384;
  table.relation.namespace_name = "public";
  table.relation.name = "t";
  table.schema.name = "t";
  for (size_t i = 0; i < width; ++i) {
    const uint32_t oid = kTypes[i % std::size(kTypes)];
    const std::string name = "c" + std::to_string(i);
    table.relation.columns.push_back({i == 0, name, oid, -1});
    table.schema.columns.push_back({name, *TallyTypeForPg(oid)});
  }
  return table;
}

void CheckTuple(const Tuple& tuple, const Tuple* old_tuple) {
  const Table table = MakeTable(tuple.cells.size());
  auto mapping = MapColumns(table.relation, table.schema);
  Check(mapping.has_value(), "a relation maps onto its own columns");
  std::vector<Value> row;
  const Tuple* old =
      old_tuple != nullptr && old_tuple->cells.size() == tuple.cells.size() ? old_tuple : nullptr;
  auto status = TupleToRow(*mapping, tuple, old, &row);
  if (!status) {
    Check(status.error().code == ErrorCode::kInvalidArgument &&
              status.error().message.starts_with("table public.t column c"),
          "a cell that does not fit names its table and column", status.error().message);
    return;
  }
  Check(row.size() == tuple.cells.size(), "a row has a value per column");
  for (size_t i = 0; i < row.size(); ++i) {
    const TupleCell* cell = &tuple.cells[i];
    if (cell->kind == TupleCell::Kind::kUnchangedToast) {
      Check(old != nullptr, "an unchanged TOAST cell needs the old row");
      cell = &old->cells[i];
    }
    Check(row[i].is_null() == (cell->kind == TupleCell::Kind::kNull),
          "a NULL cell is NULL, and only it");
    if (row[i].is_null()) continue;
    Check(row[i].type == table.schema.columns[i].type, "a value has its column's type");
    if (row[i].type == Type::kText) Check(row[i].s == cell->text, "text is as sent");
  }
}

// posts as a source: a Relation maps onto it or says why not.
void CheckRelation(const RelationMessage& relation) {
  static const SourceSchema kPosts{"posts",
                                   {{"id", Type::kInt64},
                                    {"title", Type::kText},
                                    {"created_at", Type::kTimestamp},
                                    {"is_published", Type::kBool}}};
  for (const std::vector<bool>& needed : {std::vector<bool>{}, {true, false, true, false}}) {
    auto mapping = MapColumns(relation, kPosts, needed);
    if (!mapping) {
      Check(mapping.error().code == ErrorCode::kInvalidArgument &&
                mapping.error().message.starts_with("table "),
            "a relation that does not fit names its table", mapping.error().message);
      continue;
    }
    Check(mapping->columns.size() == kPosts.columns.size(), "a mapping has each source column");
    for (const auto& column : mapping->columns) {
      Check(column.relation_index == ColumnMapping::kAbsent ||
                (column.relation_index < relation.columns.size() &&
                 relation.columns[column.relation_index].name == column.name),
            "a source column maps to the relation column of its name");
    }
  }
}

void CheckMessage(std::span<const uint8_t> bytes) {
  auto message = DecodeMessage(bytes);
  if (!message) {
    CheckCorruption(message.error(), "malformed pgoutput");
    return;
  }
  const std::string encoded = Encode(*message);
  Check(encoded.size() == bytes.size(), "a message written again has the input's length");
  auto again = DecodeMessage(Bytes(encoded));
  Check(again.has_value(), "a message written again decodes");
  Check(Encode(*again) == encoded, "a message written again reads back the same");

  if (const auto* m = std::get_if<RelationMessage>(&*message)) CheckRelation(*m);
  if (const auto* m = std::get_if<InsertMessage>(&*message)) CheckTuple(m->new_tuple, nullptr);
  if (const auto* m = std::get_if<UpdateMessage>(&*message)) {
    CheckTuple(m->new_tuple, m->old_kind == OldTupleKind::kNone ? nullptr : &m->old_tuple);
  }
  if (const auto* m = std::get_if<DeleteMessage>(&*message)) CheckTuple(m->old_tuple, nullptr);
  if (const auto* m = std::get_if<BeginMessage>(&*message)) {
    const int64_t unix = PgMicrosToUnixMicros(m->commit_time);
    if (unix != INT64_MAX && unix != INT64_MIN) {
      Check(UnixMicrosToPgMicros(unix) == m->commit_time, "wire timestamps convert back");
    }
  }
}

void CheckCopyData(std::span<const uint8_t> frame) {
  auto decoded = DecodeCopyData(frame);
  if (!decoded) {
    CheckCorruption(decoded.error(), "malformed ");
    return;
  }
  if (const auto* data = std::get_if<XLogData>(&*decoded)) {
    Check(frame.size() == 25 + data->payload.size() && data->payload.data() == frame.data() + 25,
          "an XLogData's payload is the rest of its frame");
    CheckMessage(data->payload);
  } else {
    Check(frame.size() == 18, "a keepalive is 18 bytes");
  }
}

}  // namespace
}  // namespace tally::postgres

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  tally::postgres::CheckCopyData(bytes);
  tally::postgres::CheckMessage(bytes);
  return 0;
}
