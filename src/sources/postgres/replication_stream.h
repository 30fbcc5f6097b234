// A PostgreSQL logical replication connection (libpq, the built-in pgoutput plugin).
//
// ReplicationStream owns two libpq connections to one database:
//   - the replication connection (replication=database), which runs the walsender commands
//     IDENTIFY_SYSTEM, CREATE_REPLICATION_SLOT and START_REPLICATION, then carries the
//     CopyBoth stream;
//   - a regular connection, opened on first use, for catalog queries and DDL
//     (publications, replica identity, pg_replication_slots). Keeping SQL off the
//     replication connection is what keeps a slot's exported snapshot alive (see CreateSlot).
//
// Typical use:
//   ReplicationStream s;
//   s.Open(conninfo); s.CheckReplicaIdentityFull(tables); s.EnsurePublication(pub, tables);
//   s.FindSlot(slot) or s.CreateSlot(slot);  s.Start(slot, lsn, pub);
//   loop { frame = s.Next(timeout); ...; s.SendStatus(written, flushed, applied, false); }
//
// Frames returned by Next() are the raw CopyData payloads of the stream (grammar below);
// pgoutput.h decodes them (DecodeCopyData, then DecodeMessage for the data of a 'w').
//
//   frame      := xlogdata | keepalive
//   xlogdata   := 'w' start:Int64 wal_end:Int64 send_time:Int64 data:Byte*   (data: pgoutput)
//   keepalive  := 'k' wal_end:Int64 send_time:Int64 reply_requested:Byte1
//   status     := 'r' written:Int64 flushed:Int64 applied:Int64 client_time:Int64 reply:Byte1
// Integers are big-endian; times are microseconds since 2000-01-01 00:00 UTC.
//
// Every method returns errors as values and never throws. Every network wait is bounded
// (ReplicationOptions), so no call blocks forever on a silent server; after a timeout or a
// broken connection the state of the session is unknown: Close() and open a new stream.
// (Refusals -- a missing table, REPLICA IDENTITY, a bad name -- leave it usable.) Opening
// and the commands before Start fail with kUnavailable when trying again later may get
// past the error (the server unreachable, starting up or shutting down, a lost connection,
// a timeout; see pg_client.h).
// Not thread-safe: one thread owns a ReplicationStream.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sources/postgres/pg_client.h"
#include "sources/postgres/pgoutput.h"  // Lsn, FormatLsn, DecodeCopyData

namespace tally::postgres {

struct ReplicationOptions {
  // Bound on establishing each connection (TCP, TLS, authentication). Default 10 s.
  std::chrono::milliseconds connect_timeout{10'000};
  // Bound on each command's reply. CREATE_REPLICATION_SLOT waits for the transactions open
  // on the server to finish, so this is generous. Default 120 s.
  std::chrono::milliseconds command_timeout{120'000};
  // Bound on sending a status update when the socket's buffer is full. Default 10 s.
  std::chrono::milliseconds send_timeout{10'000};
  // application_name, unless the connection string sets one (seen in pg_stat_replication).
  std::string application_name = "tally";
};

// IDENTIFY_SYSTEM's answer.
struct SystemIdentity {
  std::string system_id;  // the cluster's unique identifier (decimal text)
  int64_t timeline = 0;
  Lsn xlogpos = 0;  // the current WAL flush position
  std::string dbname;
};

// What EnsurePublication did.
struct PublicationChange {
  bool created = false;            // the publication did not exist and was created
  std::vector<std::string> added;  // tables added to it (all of them when created)
};

// A slot made by CreateSlot.
struct CreatedSlot {
  std::string name;
  Lsn consistent_point = 0;  // streaming from here misses nothing and repeats nothing
  std::string snapshot;      // exported snapshot: the data exactly as of consistent_point
};

// A row of pg_replication_slots.
struct SlotState {
  std::string name;
  std::string plugin;                  // "pgoutput" for slots made here; empty for physical slots
  std::string slot_type;               // "logical" or "physical"
  std::string database;                // empty for physical slots
  bool active = false;                 // a walsender is streaming from it now
  std::optional<Lsn> confirmed_flush;  // the position acknowledged as flushed by a client
};

class ReplicationStream {
 public:
  explicit ReplicationStream(ReplicationOptions options = {});
  ~ReplicationStream();  // Close()
  ReplicationStream(const ReplicationStream&) = delete;
  ReplicationStream& operator=(const ReplicationStream&) = delete;

  // Connects for replication to the database of `conninfo`, a libpq connection string in
  // either form ("postgresql://user:pw@host:port/db?…" or "host=… dbname=…");
  // replication=database is added. Errors name what was attempted (host, port, database,
  // user; never the password) followed by libpq's message on one line: kUnavailable when
  // trying again later may succeed (ConnectFailure::transient), else kInvalidArgument.
  // REQUIRES: not open.
  Status Open(std::string_view conninfo);

  // IDENTIFY_SYSTEM on the replication connection. REQUIRES: open, not started.
  Result<SystemIdentity> IdentifySystem();

  // Refuses, naming the first offender and the ALTER TABLE that fixes it, unless every
  // table exists and has REPLICA IDENTITY FULL (the formula needs each row's old state).
  // Tables are SQL names ("posts", "app.posts", "\"Mixed\""). REQUIRES: open.
  Status CheckReplicaIdentityFull(const std::vector<std::string>& tables);

  // Creates publication `name` FOR TABLE `tables` when it does not exist, else adds the
  // tables it lacks (ALTER PUBLICATION … ADD TABLE). Never removes a table. REQUIRES: open.
  Result<PublicationChange> EnsurePublication(std::string_view name,
                                              const std::vector<std::string>& tables);

  // The slot `name` as pg_replication_slots shows it; nullopt if there is none.
  // REQUIRES: open.
  Result<std::optional<SlotState>> FindSlot(std::string_view name);

  // CREATE_REPLICATION_SLOT name LOGICAL pgoutput EXPORT_SNAPSHOT. The exported snapshot
  // stays importable (SET TRANSACTION SNAPSHOT '<snapshot>' in a REPEATABLE READ
  // transaction on another connection) only until this replication connection runs its
  // next command or closes: import it before calling Start() or anything else here.
  // Slot names are 1-63 of [a-z0-9_]. REQUIRES: open, not started. A temporary slot
  // (CREATE_REPLICATION_SLOT name TEMPORARY …) is dropped when this connection closes: it
  // serves only to export a snapshot at a consistent point.
  enum class SlotLifetime { kPersistent, kTemporary };
  Result<CreatedSlot> CreateSlot(std::string_view name,
                                 SlotLifetime lifetime = SlotLifetime::kPersistent);

  // START_REPLICATION SLOT slot LOGICAL start (proto_version '1', publication_names
  // '"publication"'). The server starts at the later of `start` and the slot's
  // confirmed_flush (0 = from confirmed_flush). After this only Next, SendStatus and Close.
  // REQUIRES: open, not started.
  Status Start(std::string_view slot, Lsn start, std::string_view publication);

  // The next CopyData frame (grammar above), or nullopt when none arrived within
  // `timeout`. An error when the server ends the stream or the connection breaks; the
  // stream is then unusable (Close, then open a new one). REQUIRES: started.
  Result<std::optional<std::string>> Next(std::chrono::milliseconds timeout);

  // Sends a standby status update: the positions written, flushed (durable: the slot may
  // discard WAL before it) and applied, and whether the server should answer with a
  // keepalive at once. Waits at most send_timeout for the socket. REQUIRES: started.
  Status SendStatus(Lsn written, Lsn flushed, Lsn applied, bool reply_requested);

  // Ends the stream (CopyDone, bounded wait) and closes both connections. Idempotent.
  void Close();

  bool is_open() const { return repl_ != nullptr; }
  bool is_streaming() const { return streaming_; }
  // "host:port, database db, user u": what Open attempted (no password).
  const std::string& target() const { return target_; }

 private:
  ConnectOptions ConnectOptionsFor(bool replication) const;
  Deadline CommandDeadline() const { return Deadline::In(options_.command_timeout); }
  Status EnsureSqlConnection();

  const ReplicationOptions options_;
  ConnParams params_;  // the connection string Open parsed
  std::string target_;
  PgConn repl_;             // replication=database
  PgConn sql_;              // regular, opened on first use
  bool streaming_ = false;  // START_REPLICATION succeeded; CopyBoth mode
};

}  // namespace tally::postgres
