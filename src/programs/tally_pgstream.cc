// tally_pgstream: shows a PostgreSQL logical replication stream (pgoutput) frame by frame.
//
// It does what tallyd's PostgreSQL source does before counting: connects for replication,
// refuses tables without REPLICA IDENTITY FULL, ensures the publication and the slot
// (--create), starts streaming, and acknowledges the end of every commit it has printed
// (once a second, when the server asks, and at exit). Each frame is one line on stdout:
//
//   w start=0/16B3748 end=0/16B3748 kind=I len=37 data=4900004001...   (XLogData)
//   k end=0/16B37A0 reply=0                                             (keepalive)
//
// `kind` is the pgoutput message type (B begin, R relation, I insert, U update, D delete,
// T truncate, C commit, ...); `data` is the start of the message in hex ("..." if cut).
// Progress and errors go to stderr. Exit status: 0 after --seconds, --frames or SIGINT /
// SIGTERM; 1 on any error (message on stderr).
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "sources/postgres/pgoutput.h"
#include "sources/postgres/replication_stream.h"

namespace {

namespace pg = tally::postgres;
using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const std::string& message) {
  std::fflush(stdout);
  fmt::print(stderr, "tally_pgstream: {}\n", message);
  return 1;
}

void Note(const std::string& message) { fmt::print(stderr, "tally_pgstream: {}\n", message); }

std::string Hex(std::span<const uint8_t> bytes, size_t limit) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  const size_t n = bytes.size() < limit ? bytes.size() : limit;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 0xf]);
  }
  if (n < bytes.size()) out += "...";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tally_pgstream: shows a PostgreSQL logical replication stream (pgoutput), "
      "one frame per line"};
  std::string source;
  std::string slot;
  std::string publication;
  std::string start_lsn_text;
  std::vector<std::string> tables;
  bool create = false;
  bool quiet = false;
  bool no_ack = false;
  double seconds = 10;
  int64_t max_frames = 0;
  size_t dump_bytes = 32;
  int ack_interval_ms = 1000;
  app.add_option("--source", source,
                 "libpq connection string: postgresql://user:pw@host:port/db or key=value")
      ->required();
  app.add_option("--slot", slot, "Logical replication slot (pgoutput)")->required();
  app.add_option("--publication", publication, "Publication to stream")->required();
  app.add_option("--tables", tables, "Tables, comma-separated; each needs REPLICA IDENTITY FULL")
      ->required()
      ->delimiter(',');
  app.add_flag("--create", create,
               "Create the publication (or add missing tables to it) and the slot when missing");
  app.add_option("--start-lsn", start_lsn_text,
                 "Start here (X/X); default: the slot's confirmed position");
  app.add_option("--seconds", seconds, "Stop after this many seconds")->capture_default_str();
  app.add_option("--frames", max_frames, "Stop after this many XLogData frames (0: no limit)")
      ->capture_default_str();
  app.add_option("--dump-bytes", dump_bytes, "Hex bytes of each message to print")
      ->capture_default_str();
  app.add_option("--ack-interval-ms", ack_interval_ms, "Status update period")
      ->capture_default_str();
  app.add_flag("--no-ack", no_ack,
               "Never confirm a position (status updates carry 0): a rerun sees it all again");
  app.add_flag("--quiet", quiet, "Print no frames, only the summary");
  CLI11_PARSE(app, argc, argv);

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  tally::Lsn start_lsn = 0;
  if (!start_lsn_text.empty()) {
    auto parsed = tally::ParseLsn(start_lsn_text);
    if (!parsed) return Fail(parsed.error().message);
    start_lsn = *parsed;
  }

  pg::ReplicationStream stream;
  if (auto s = stream.Open(source); !s) return Fail(s.error().message);
  auto id = stream.IdentifySystem();
  if (!id) return Fail(id.error().message);
  Note(fmt::format("connected ({}): system {}, timeline {}, WAL at {}", stream.target(),
                   id->system_id, id->timeline, tally::FormatLsn(id->xlogpos)));

  if (auto s = stream.CheckReplicaIdentityFull(tables); !s) return Fail(s.error().message);
  if (create) {
    auto change = stream.EnsurePublication(publication, tables);
    if (!change) return Fail(change.error().message);
    std::string added;
    for (const std::string& t : change->added) added += (added.empty() ? "" : ", ") + t;
    if (change->created) {
      Note(fmt::format("publication {} created for {}", publication, added));
    } else if (!added.empty()) {
      Note(fmt::format("publication {}: added {}", publication, added));
    }
  }

  auto existing = stream.FindSlot(slot);
  if (!existing) return Fail(existing.error().message);
  if (existing->has_value()) {
    const pg::SlotState& state = **existing;
    if (state.slot_type != "logical" || state.plugin != "pgoutput") {
      return Fail(fmt::format("replication slot {} is not a logical pgoutput slot ({} {})", slot,
                              state.slot_type, state.plugin));
    }
    if (state.database != id->dbname) {
      return Fail(fmt::format("replication slot {} belongs to database {}, not {}", slot,
                              state.database, id->dbname));
    }
    Note(fmt::format("slot {} exists: confirmed_flush {}", slot,
                     state.confirmed_flush ? tally::FormatLsn(*state.confirmed_flush) : "none"));
  } else if (create) {
    auto created = stream.CreateSlot(slot);
    if (!created) return Fail(created.error().message);
    // The snapshot is importable only until the next command on the replication
    // connection (START_REPLICATION below); tallyd's backfill reads the rows under it first.
    Note(fmt::format("slot {} created: consistent point {}, snapshot {}", slot,
                     tally::FormatLsn(created->consistent_point), created->snapshot));
    if (start_lsn == 0) start_lsn = created->consistent_point;
  } else {
    return Fail(fmt::format("replication slot {} does not exist (--create creates it)", slot));
  }

  if (auto s = stream.Start(slot, start_lsn, publication); !s) return Fail(s.error().message);
  Note(start_lsn == 0 ? std::string("streaming from the slot's confirmed position")
                      : "streaming from " + tally::FormatLsn(start_lsn));

  const Clock::time_point began = Clock::now();
  const Clock::time_point deadline =
      began + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  const auto ack_interval = std::chrono::milliseconds(ack_interval_ms);
  Clock::time_point next_ack = began + ack_interval;
  int64_t frames = 0;  // CopyData frames
  int64_t xlogdata = 0;
  int64_t keepalives = 0;
  int64_t bytes = 0;
  tally::Lsn received = 0;   // the start of the last XLogData
  tally::Lsn committed = 0;  // the end of the last commit printed: what we acknowledge
  tally::Lsn acked = 0;
  Clock::time_point first_data{};  // arrival of the first XLogData
  Clock::time_point last_data{};   // and of the last
  auto send_status = [&](bool reply) -> tally::Status {
    const tally::Lsn flushed = no_ack ? 0 : committed;
    if (auto s = stream.SendStatus(no_ack ? 0 : received, flushed, flushed, reply); !s) return s;
    if (flushed != acked) {
      acked = flushed;
      std::fflush(stdout);
      Note("ack flushed=" + tally::FormatLsn(acked));
    }
    return tally::OkStatus();
  };

  while (g_stop == 0 && (max_frames == 0 || xlogdata < max_frames)) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    if (now >= next_ack) {
      if (auto s = send_status(false); !s) return Fail(s.error().message);
      next_ack = now + ack_interval;
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::min({deadline, next_ack, now + std::chrono::milliseconds(100)}) - now);
    auto frame = stream.Next(wait);
    if (!frame) return Fail(frame.error().message);
    if (!frame->has_value()) {
      std::fflush(stdout);
      continue;
    }
    const std::string& raw = **frame;
    ++frames;
    bytes += static_cast<int64_t>(raw.size());
    auto decoded = pg::DecodeCopyData(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
    if (!decoded) return Fail(decoded.error().message);
    if (const auto* k = std::get_if<pg::PrimaryKeepalive>(&*decoded)) {
      ++keepalives;
      if (!quiet)
        fmt::print("k end={} reply={}\n", tally::FormatLsn(k->wal_end), k->reply_requested ? 1 : 0);
      if (k->reply_requested) {
        if (auto s = send_status(false); !s) return Fail(s.error().message);
      }
      continue;
    }
    const auto& w = std::get<pg::XLogData>(*decoded);
    if (xlogdata++ == 0) first_data = Clock::now();
    last_data = Clock::now();
    received = w.wal_start;
    const char kind = w.payload.empty() ? '?' : static_cast<char>(w.payload[0]);
    if (kind == 'C') {
      auto message = pg::DecodeMessage(w.payload);
      if (!message) return Fail(message.error().message);
      committed = std::get<pg::CommitMessage>(*message).end_lsn;
    }
    if (!quiet) {
      fmt::print("w start={} end={} kind={} len={} data={}\n", tally::FormatLsn(w.wal_start),
                 tally::FormatLsn(w.wal_end), kind, w.payload.size(), Hex(w.payload, dump_bytes));
    }
  }
  std::fflush(stdout);
  if (auto s = send_status(false); !s) return Fail(s.error().message);
  stream.Close();
  const double elapsed = std::chrono::duration<double>(Clock::now() - began).count();
  const double data_span = std::chrono::duration<double>(last_data - first_data).count();
  Note(
      fmt::format("done: {} frames ({} XLogData, {} keepalives, {} bytes) in {:.3f} s; "
                  "XLogData first to last {:.3f} s ({:.0f}/s); acknowledged {}",
                  frames, xlogdata, keepalives, bytes, elapsed, data_span,
                  data_span > 0 ? static_cast<double>(xlogdata - 1) / data_span : 0.0,
                  no_ack ? std::string("nothing") : tally::FormatLsn(acked)));
  return 0;
}
