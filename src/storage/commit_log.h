// CommitLog: tally's write-ahead log, the durability point of every commit.
//
// Each commit appends one record to the current segment and, in sync mode, fdatasyncs
// it: a sequential append is the cheapest durable write there is. The RocksDB tables are
// brought up to date later, in the background, by checkpoints that write each counter
// changed since the previous checkpoint once (see RocksDbStore), after which the segments
// they cover are deleted.
//
// Files: <dir>/<segment number, 16 digits>.log, numbered from 1, replayed in order. Other
// files in <dir> are not segments: never read, never deleted.
//   segment := record* zeros*
//   record  := length:u32-le crc32c(payload):u32-le payload[length]     (length > 0)
// A record that is short or fails its checksum at the end of the newest segment is a
// write cut by a crash: it never returned to the committer, so nothing depended on it,
// and it is cut off. Anywhere else it is corruption, and recovery stops with an error.
//
// Segments are preallocated: zeros are written ahead of the records, so that an append
// overwrites bytes the file already has instead of growing it. ext4's fdatasync must write
// the inode whenever the file's size changed; over preallocated bytes it writes the data
// and flushes, nothing more. Measured here (virtio disk, 4 KB records): fdatasync 330-370 µs
// appending against 155-195 µs over zeros, and about 40 % less CPU. A zero length therefore
// ends a segment's records; after it only zeros may follow (in the newest segment anything
// else is the torn tail of a crash and is cut off).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tally::storage {

class CommitLog {
 public:
  // Reads every record of the segments numbered >= `first_segment` in order, calling
  // `record` with each payload; cuts off a torn tail of the newest segment. Returns the
  // highest segment number present (0 when none).
  static Result<uint64_t> Replay(const std::string& dir, uint64_t first_segment,
                                 const std::function<Status(std::string_view)>& record);

  // Starts writing segment `segment` (a new, empty file) in `dir`.
  static Result<std::unique_ptr<CommitLog>> Create(const std::string& dir, uint64_t segment);

  ~CommitLog();
  CommitLog(const CommitLog&) = delete;
  CommitLog& operator=(const CommitLog&) = delete;

  // Threads: Append() and Rotate() run one at a time; Sync() runs one at a time and may
  // overlap an Append() without `sync` on another thread (RocksDbStore passes the
  // committer's locks on; see engine/persistence.h). Rotate() and an Append() with `sync`
  // are Syncs too.

  // Appends one record (`payload` not empty); with `sync`, returns once it is on stable
  // storage.
  Status Append(std::string_view payload, bool sync);

  // Makes every record appended before the call durable (one fdatasync; none when nothing
  // was appended since the last Sync).
  Status Sync();

  // Syncs and closes the current segment and starts the next one. Returns its number.
  // REQUIRES: no Append() or Sync() runs concurrently.
  Result<uint64_t> Rotate();

  // Deletes the segments numbered below `segment`.
  void DropBefore(uint64_t segment) { DropSegmentsBefore(dir_, segment); }
  // The same for any directory; safe while another thread appends (it never touches the
  // segment being written, which is numbered higher).
  static void DropSegmentsBefore(const std::string& dir, uint64_t segment);

  uint64_t segment() const { return segment_; }
  uint64_t segment_bytes() const { return segment_bytes_; }

 private:
  CommitLog(std::string dir, uint64_t segment, int fd);
  static std::string SegmentPath(const std::string& dir, uint64_t segment);
  static std::vector<uint64_t> ListSegments(const std::string& dir);
  // Writes zeros from `preallocated_` on, so that at least `needed` bytes of the segment
  // exist. A failure is not an error of the append: the append then grows the file itself.
  void Preallocate(uint64_t needed);

  const std::string dir_;
  uint64_t segment_;
  int fd_;
  uint64_t segment_bytes_ = 0;  // bytes of whole records
  uint64_t preallocated_ = 0;   // bytes of the file: records, then zeros
  // Records appended, ever (written by Append), and of those the ones a Sync made durable
  // (Sync's own): a Sync that overlaps an Append covers what was appended before it began.
  std::atomic<uint64_t> appended_{0};
  uint64_t synced_ = 0;
  std::string buffer_;  // header + payload of the record being written
};

}  // namespace tally::storage
