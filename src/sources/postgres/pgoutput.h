// Decoding of PostgreSQL logical replication: the walsender's CopyData frames (XLogData,
// primary keepalive), the standby status update we send back, and the messages of the
// built-in `pgoutput` plugin, protocol version 1 (PostgreSQL 10..15, text tuple format, no
// streaming of in-progress transactions). Pure functions on bytes: no I/O, no state.
//
// Every integer on the wire is big-endian. Every read is bounds-checked: bytes that do not
// decode give a kCorruption error naming the message and the byte offset, never UB.
//
// Lifetime: a decoded Tuple's text cells and an XLogData's payload are views into the
// buffer passed to the decoder; they are valid while that buffer is. Everything else
// (relation, type and origin names) is owned by the decoded message.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/lsn.h"
#include "core/status.h"

namespace tally::postgres {

// PostgreSQL's timestamps on the wire are microseconds since 2000-01-01 00:00:00 UTC.
inline constexpr int64_t kPgEpochUnixMicros = 946'684'800'000'000;

// A wire timestamp as microseconds since the Unix epoch; saturates at the int64 range.
int64_t PgMicrosToUnixMicros(int64_t pg_micros);
// The inverse; saturates likewise.
int64_t UnixMicrosToPgMicros(int64_t unix_micros);

// ---------------------------------------------------------------------------------------
// The outer frames: payloads of the CopyData messages of START_REPLICATION.

// 'w': a piece of the WAL stream; for logical replication one pgoutput message.
struct XLogData {
  Lsn wal_start = 0;
  Lsn wal_end = 0;
  int64_t send_time = 0;             // server clock, microseconds since 2000-01-01
  std::span<const uint8_t> payload;  // a view into the frame
};

// 'k': the server's heartbeat.
struct PrimaryKeepalive {
  Lsn wal_end = 0;
  int64_t send_time = 0;         // microseconds since 2000-01-01
  bool reply_requested = false;  // reply with a standby status update at once
};

using CopyDataMessage = std::variant<XLogData, PrimaryKeepalive>;

// Decodes one CopyData payload sent by the walsender. kCorruption for a truncated frame,
// trailing bytes after a keepalive, or an unknown frame type.
Result<CopyDataMessage> DecodeCopyData(std::span<const uint8_t> frame);

// 'r': what the client has received (write), made durable (flush) and applied. The slot's
// confirmed position follows `flush`.
struct StandbyStatusUpdate {
  Lsn write = 0;
  Lsn flush = 0;
  Lsn apply = 0;
  int64_t client_time = 0;       // microseconds since 2000-01-01
  bool reply_requested = false;  // ask the server to answer with a keepalive
};

// The 34-byte CopyData payload of a standby status update.
std::string EncodeStandbyStatusUpdate(const StandbyStatusUpdate& update);

// ---------------------------------------------------------------------------------------
// pgoutput messages (the payload of an XLogData).

// 'B': a transaction starts. Its changes follow, then a Commit.
struct BeginMessage {
  Lsn final_lsn = 0;        // the LSN of the commit record
  int64_t commit_time = 0;  // microseconds since 2000-01-01
  uint32_t xid = 0;
};

// 'C': the transaction of the last Begin committed.
struct CommitMessage {
  uint8_t flags = 0;  // currently unused, 0
  Lsn commit_lsn = 0;
  Lsn end_lsn = 0;          // the end of the commit record: the position to confirm
  int64_t commit_time = 0;  // microseconds since 2000-01-01
};

// 'O': the transaction was replayed from another node (sent only for such transactions).
struct OriginMessage {
  Lsn origin_commit_lsn = 0;
  std::string name;
};

// 'R': a relation's current shape. Sent before the first change of the relation in a
// session and again after any change to it; it replaces what was known for that oid.
struct RelationMessage {
  struct Column {
    bool is_key = false;  // part of the replica identity
    std::string name;
    uint32_t type_oid = 0;
    int32_t type_modifier = -1;  // atttypmod
  };
  uint32_t oid = 0;
  std::string namespace_name;  // "" for pg_catalog
  std::string name;
  char replica_identity = 'd';  // 'd' default, 'n' nothing, 'f' full, 'i' index
  std::vector<Column> columns;  // in table order, generated columns excluded

  // "schema.table", or just the table for pg_catalog.
  std::string QualifiedName() const;
};

// 'Y': a non-builtin data type used by a following Relation.
struct TypeMessage {
  uint32_t oid = 0;
  std::string namespace_name;
  std::string name;
};

// One cell of a TupleData.
struct TupleCell {
  enum class Kind : char {
    kNull = 'n',
    kUnchangedToast = 'u',  // a TOASTed value the change did not touch; not sent
    kText = 't',
  };
  Kind kind = Kind::kNull;
  std::string_view text;  // kText: the value in PostgreSQL's text output format
};

// A TupleData: one cell per column of the relation, in the Relation's order.
struct Tuple {
  std::vector<TupleCell> cells;
};

// Which old row an Update or Delete carries.
enum class OldTupleKind : char {
  kNone = 0,    // Update only: no old row (the key did not change, identity not FULL)
  kKey = 'K',   // the replica identity columns only; the other cells are NULL
  kFull = 'O',  // the whole old row (REPLICA IDENTITY FULL)
};

// 'I'
struct InsertMessage {
  uint32_t relation_oid = 0;
  Tuple new_tuple;
};

// 'U'
struct UpdateMessage {
  uint32_t relation_oid = 0;
  OldTupleKind old_kind = OldTupleKind::kNone;
  Tuple old_tuple;  // empty when old_kind is kNone
  Tuple new_tuple;
};

// 'D'
struct DeleteMessage {
  uint32_t relation_oid = 0;
  OldTupleKind old_kind = OldTupleKind::kKey;  // kKey or kFull
  Tuple old_tuple;
};

// 'T'
struct TruncateMessage {
  static constexpr uint8_t kCascade = 1;
  static constexpr uint8_t kRestartIdentity = 2;
  uint8_t options = 0;  // a combination of the bits above
  std::vector<uint32_t> relation_oids;
};

// 'M': a pg_logical_emit_message() (sent only with the `messages` option).
struct LogicalMessage {
  bool transactional = false;
  Lsn lsn = 0;
  std::string prefix;
  std::span<const uint8_t> content;  // a view into the message
};

using Message =
    std::variant<BeginMessage, CommitMessage, OriginMessage, RelationMessage, TypeMessage,
                 InsertMessage, UpdateMessage, DeleteMessage, TruncateMessage, LogicalMessage>;

// Decodes one pgoutput message of protocol version 1. kCorruption when the bytes are
// truncated, have trailing garbage or an unknown message, tuple or column kind; binary
// ('b') cells are refused too (we always ask for the text format).
Result<Message> DecodeMessage(std::span<const uint8_t> bytes);

// The message's name ("Begin", "Insert", ...) for a type byte, or nullptr if unknown.
const char* MessageName(uint8_t type);

}  // namespace tally::postgres
