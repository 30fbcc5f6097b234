#include "storage/commit_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include "core/crc32c.h"
#include "core/integer.h"

namespace tally::storage {
namespace {

constexpr size_t kHeaderBytes = 8;
// No commit is this large; a bigger length in a header means garbage, not a record.
constexpr uint32_t kMaxRecordBytes = 1u << 30;
// Zeros are written ahead in steps that grow with the segment (a segment of a quiet server
// stays small), from 64 KiB up to 1 MiB.
constexpr uint64_t kMinPreallocateBytes = 64 << 10;
constexpr uint64_t kMaxPreallocateBytes = 1 << 20;
constexpr char kZeros[64 << 10] = {};

bool AllZero(std::string_view bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; });
}

Status Errno(std::string_view what, const std::string& path) {
  return IOError(fmt::format("{} {}: {}", what, path,
                             std::error_code(errno, std::system_category()).message()));
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int result = ::fsync(fd);
  ::close(fd);
  if (result != 0) return Errno("cannot sync directory", dir);
  return OkStatus();
}

}  // namespace

std::string CommitLog::SegmentPath(const std::string& dir, uint64_t segment) {
  return fmt::format("{}/{:016d}.log", dir, segment);
}

std::vector<uint64_t> CommitLog::ListSegments(const std::string& dir) {
  std::vector<uint64_t> segments;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 20 || !name.ends_with(".log")) continue;
    // Not named by a number: not a segment (nothing here wrote it), left alone.
    const std::optional<uint64_t> segment = ParseUint64(std::string_view(name).substr(0, 16));
    if (segment) segments.push_back(*segment);
  }
  std::sort(segments.begin(), segments.end());
  return segments;
}

Result<uint64_t> CommitLog::Replay(const std::string& dir, uint64_t first_segment,
                                   const std::function<Status(std::string_view)>& record) {
  const std::vector<uint64_t> segments = ListSegments(dir);
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i] < first_segment) continue;
    const bool newest = i + 1 == segments.size();
    const std::string path = SegmentPath(dir, segments[i]);
    const int fd = ::open(path.c_str(), O_RDWR);
    if (fd < 0) return tl::unexpected(Errno("cannot open log segment", path).error());
    std::string bytes;
    const off_t size = ::lseek(fd, 0, SEEK_END);
    bytes.resize(static_cast<size_t>(std::max<off_t>(size, 0)));
    const ssize_t read = ::pread(fd, bytes.data(), bytes.size(), 0);
    if (read != static_cast<ssize_t>(bytes.size())) {
      ::close(fd);
      return tl::unexpected(Errno("cannot read log segment", path).error());
    }
    size_t offset = 0;
    while (offset < bytes.size()) {
      // The preallocated zeros after the last record: the segment's records end here.
      if (AllZero(std::string_view(bytes).substr(offset))) break;
      uint32_t length = 0;
      uint32_t crc = 0;
      bool whole = bytes.size() - offset >= kHeaderBytes;
      if (whole) {
        std::memcpy(&length, bytes.data() + offset, 4);
        std::memcpy(&crc, bytes.data() + offset + 4, 4);
        whole = length > 0 && length <= kMaxRecordBytes &&
                bytes.size() - offset - kHeaderBytes >= length &&
                Crc32c(bytes.data() + offset + kHeaderBytes, length) == crc;
      }
      if (!whole) {
        if (!newest) {
          ::close(fd);
          return Corruption(fmt::format("log segment {} is damaged at byte {}", path, offset));
        }
        spdlog::warn("cutting off a torn record at byte {} of {} (a write cut by a crash)", offset,
                     path);
        if (::ftruncate(fd, static_cast<off_t>(offset)) != 0 || ::fsync(fd) != 0) {
          ::close(fd);
          return tl::unexpected(Errno("cannot cut off the torn tail of", path).error());
        }
        break;
      }
      auto status = record(std::string_view(bytes.data() + offset + kHeaderBytes, length));
      if (!status) {
        ::close(fd);
        return tl::unexpected(status.error());
      }
      offset += kHeaderBytes + length;
    }
    ::close(fd);
  }
  return segments.empty() ? 0 : segments.back();
}

Result<std::unique_ptr<CommitLog>> CommitLog::Create(const std::string& dir, uint64_t segment) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const std::string path = SegmentPath(dir, segment);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return tl::unexpected(Errno("cannot create log segment", path).error());
  if (auto status = SyncDirectory(dir); !status) {
    ::close(fd);
    return tl::unexpected(status.error());
  }
  return std::unique_ptr<CommitLog>(new CommitLog(dir, segment, fd));
}

CommitLog::CommitLog(std::string dir, uint64_t segment, int fd)
    : dir_(std::move(dir)), segment_(segment), fd_(fd) {}

CommitLog::~CommitLog() {
  if (fd_ >= 0) {
    if (appended_.load(std::memory_order_relaxed) != synced_) ::fdatasync(fd_);
    ::close(fd_);
  }
}

Status CommitLog::Append(std::string_view payload, bool sync) {
  buffer_.resize(kHeaderBytes);
  const auto length = static_cast<uint32_t>(payload.size());
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  std::memcpy(buffer_.data(), &length, 4);
  std::memcpy(buffer_.data() + 4, &crc, 4);
  buffer_.append(payload);
  if (segment_bytes_ + buffer_.size() > preallocated_) Preallocate(segment_bytes_ + buffer_.size());
  // Positional writes at the end of the last whole record: when a write fails half-way and
  // the committer retries the batch, the retry overwrites the partial bytes instead of
  // following them (a record after a torn one would be cut off at replay).
  size_t written = 0;
  while (written < buffer_.size()) {
    const ssize_t n = ::pwrite(fd_, buffer_.data() + written, buffer_.size() - written,
                               static_cast<off_t>(segment_bytes_ + written));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot append to log segment", SegmentPath(dir_, segment_));
    }
    written += static_cast<size_t>(n);
  }
  segment_bytes_ += buffer_.size();
  preallocated_ = std::max(preallocated_, segment_bytes_);
  appended_.store(appended_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  if (sync) return Sync();
  return OkStatus();
}

void CommitLog::Preallocate(uint64_t needed) {
  const uint64_t step = std::clamp(segment_bytes_, kMinPreallocateBytes, kMaxPreallocateBytes);
  const uint64_t target = needed + step;
  while (preallocated_ < target) {
    const size_t chunk =
        static_cast<size_t>(std::min<uint64_t>(target - preallocated_, sizeof kZeros));
    const ssize_t n = ::pwrite(fd_, kZeros, chunk, static_cast<off_t>(preallocated_));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    preallocated_ += static_cast<uint64_t>(n);
  }
}

Status CommitLog::Sync() {
  // Read before the fdatasync: every record counted here was written by then, so it is
  // covered; one appended meanwhile waits for the next Sync.
  const uint64_t appended = appended_.load(std::memory_order_acquire);
  if (appended == synced_) return OkStatus();
  if (::fdatasync(fd_) != 0) return Errno("cannot sync log segment", SegmentPath(dir_, segment_));
  synced_ = appended;
  return OkStatus();
}

Result<uint64_t> CommitLog::Rotate() {
  if (auto status = Sync(); !status) return tl::unexpected(status.error());
  const uint64_t next = segment_ + 1;
  const std::string path = SegmentPath(dir_, next);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return tl::unexpected(Errno("cannot create log segment", path).error());
  if (auto status = SyncDirectory(dir_); !status) {
    ::close(fd);
    return tl::unexpected(status.error());
  }
  ::close(fd_);
  fd_ = fd;
  segment_ = next;
  segment_bytes_ = 0;
  preallocated_ = 0;
  return next;
}

void CommitLog::DropSegmentsBefore(const std::string& dir, uint64_t segment) {
  for (const uint64_t existing : ListSegments(dir)) {
    if (existing >= segment) break;
    std::error_code error;
    std::filesystem::remove(SegmentPath(dir, existing), error);
  }
}

}  // namespace tally::storage
