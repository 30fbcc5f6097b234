#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/test_dir.h"
#include "storage/commit_log.h"
#include "storage/rocksdb_store.h"

namespace tally::storage {
namespace {

// Collects what a store loads, applying the operations in order.
class Collected final : public engine::LoadVisitor {
 public:
  void Put(std::string_view key, const engine::CounterRecord& record, engine::LoadSource) override {
    counters[std::string(key)] = record;
  }
  void Delete(std::string_view key, engine::LoadSource) override {
    counters.erase(std::string(key));
  }
  void ClearAll(engine::LoadSource) override { counters.clear(); }
  std::map<std::string, engine::CounterRecord> counters;
};

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestDirectory("tally_storage_test_");
    if (!testing::InDeathTestChild()) std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    if (!testing::InDeathTestChild()) std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<RocksDbStore> Open(Collected* loaded) {
    auto store = RocksDbStore::Open({.path = dir_.string()});
    EXPECT_TRUE(store.has_value());
    EXPECT_TRUE((*store)->Load(*loaded).has_value());
    return std::move(*store);
  }

  // Runs `work` in a child process that then dies without running any destructor, as a
  // crash would: no final checkpoint, no clean close. The child is a fresh exec of this
  // test binary (gtest's "threadsafe" death-test style): a plain fork would inherit
  // RocksDB's background thread pool without its threads.
  template <typename Work>
  static void CrashAfter(Work work) {
    ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
    EXPECT_EXIT(
        {
          work();
          ::_exit(0);
        },
        ::testing::ExitedWithCode(0), "");
  }

  static engine::CommitBatch Batch(uint64_t epoch) {
    engine::CommitBatch batch;
    batch.set_epoch(epoch);
    return batch;
  }

  std::filesystem::path dir_;
};

TEST_F(StoreTest, ReplaysTheLogAfterACrash) {
  CrashAfter([&] {
    Collected loaded;
    auto store = Open(&loaded);
    auto batch = Batch(1);
    batch.AddPut("a", {7, 0});
    batch.AddPut("b", {-3, 4102444800000});
    if (!store->Commit(batch, true)) ::_exit(1);
    auto second = Batch(2);
    second.AddDelete("b");
    second.AddPut("c", {1, 0});
    if (!store->Commit(second, true)) ::_exit(1);
  });
  Collected loaded;
  auto store = Open(&loaded);
  ASSERT_EQ(loaded.counters.size(), 2u);
  EXPECT_EQ(loaded.counters["a"].value, 7);
  EXPECT_EQ(loaded.counters["c"].value, 1);
}

TEST_F(StoreTest, CheckpointsCoverTheLogAndClearAllWorks) {
  {
    Collected loaded;
    auto store = Open(&loaded);
    auto batch = Batch(1);
    batch.AddPut("x", {1, 0});
    batch.AddPut("y", {2, 0});
    ASSERT_TRUE(store->Commit(batch, true).has_value());
    // A checkpoint of x and y; the log segment holding them is dropped.
    auto token = store->BeginCheckpoint();
    ASSERT_TRUE(token.has_value());
    ASSERT_TRUE(store->CheckpointWrite(batch).has_value());
    ASSERT_TRUE(store->FinishCheckpoint(*token).has_value());
    auto clear = Batch(2);
    clear.ClearAll();
    clear.AddPut("z", {3, 0});
    ASSERT_TRUE(store->Commit(clear, true).has_value());
  }
  Collected loaded;
  auto store = Open(&loaded);
  ASSERT_EQ(loaded.counters.size(), 1u);
  EXPECT_EQ(loaded.counters["z"].value, 3);
}

// A checkpoint writes a batch's puts sorted by key (table_format.cc): every key arrives,
// and a key put twice in one batch keeps its later value, as written in order would.
TEST_F(StoreTest, ACheckpointKeepsEveryPutAndTheLaterOfTwo) {
  {
    Collected loaded;
    auto store = Open(&loaded);
    auto batch = Batch(1);
    for (int i = 99; i >= 0; --i) batch.AddPut("k" + std::to_string(i), {i, 0});
    batch.AddPut("k5", {-5, 0});
    // Not committed: what is loaded comes from the tables alone.
    auto token = store->BeginCheckpoint();
    ASSERT_TRUE(token.has_value());
    ASSERT_TRUE(store->CheckpointWrite(batch).has_value());
    ASSERT_TRUE(store->FinishCheckpoint(*token).has_value());
  }
  Collected loaded;
  auto store = Open(&loaded);
  ASSERT_EQ(loaded.counters.size(), 100u);
  EXPECT_EQ(loaded.counters["k5"].value, -5);
  EXPECT_EQ(loaded.counters["k0"].value, 0);
  EXPECT_EQ(loaded.counters["k99"].value, 99);
}

TEST_F(StoreTest, AnUnfinishedCheckpointChangesNothingRecoveryUses) {
  CrashAfter([&] {
    Collected loaded;
    auto store = Open(&loaded);
    auto batch = Batch(1);
    batch.AddPut("k", {10, 0});
    if (!store->Commit(batch, true)) ::_exit(1);
    auto token = store->BeginCheckpoint();
    if (!token) ::_exit(1);
    engine::CommitBatch newer;  // a value the log never saw: must not survive
    newer.AddPut("k", {99, 0});
    if (!store->CheckpointWrite(newer)) ::_exit(1);
  });
  Collected loaded;
  auto store = Open(&loaded);
  ASSERT_EQ(loaded.counters.size(), 1u);
  EXPECT_EQ(loaded.counters["k"].value, 10);
}

TEST_F(StoreTest, CutsOffATornTail) {
  CrashAfter([&] {
    Collected loaded;
    auto store = Open(&loaded);
    auto batch = Batch(1);
    batch.AddPut("kept", {5, 0});
    if (!store->Commit(batch, true)) ::_exit(1);
  });
  // Append half a record to the segment written, as a crash in the middle of a write would.
  std::filesystem::path with_data;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "log")) {
    if (std::filesystem::file_size(entry.path()) > 0) with_data = entry.path();
  }
  const int fd = ::open(with_data.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  const char garbage[] = {40, 0, 0, 0, 1, 2, 3, 4, 'p', 'a'};
  ASSERT_EQ(::write(fd, garbage, sizeof garbage), static_cast<ssize_t>(sizeof garbage));
  ::close(fd);
  // The segment with data is not the newest one only if an empty newer one exists; remove
  // those so that the torn record is at the end of the log, where a crash leaves it.
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "log")) {
    if (entry.path() > with_data) std::filesystem::remove(entry.path());
  }
  Collected loaded;
  auto store = Open(&loaded);
  ASSERT_EQ(loaded.counters.size(), 1u);
  EXPECT_EQ(loaded.counters["kept"].value, 5);
}

TEST_F(StoreTest, RefusesADamagedOlderSegment) {
  std::filesystem::create_directories(dir_ / "log");
  {
    auto log = CommitLog::Create((dir_ / "log").string(), 1);
    ASSERT_TRUE(log.has_value());
    ASSERT_TRUE((*log)->Append("first", true).has_value());
    ASSERT_TRUE((*log)->Rotate().has_value());
    ASSERT_TRUE((*log)->Append("second", true).has_value());
  }
  {
    const int fd = ::open((dir_ / "log" / "0000000000000001.log").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "X", 1, 9), 1);  // flip a payload byte
    ::close(fd);
  }
  auto replay =
      CommitLog::Replay((dir_ / "log").string(), 1, [](std::string_view) { return OkStatus(); });
  ASSERT_FALSE(replay.has_value());
  EXPECT_EQ(replay.error().code, ErrorCode::kCorruption);
}

// Replays `dir` and returns its records, or the replay's error.
Result<std::vector<std::string>> ReplayAll(const std::filesystem::path& dir) {
  std::vector<std::string> records;
  auto replay = CommitLog::Replay(dir.string(), 1, [&](std::string_view payload) {
    records.emplace_back(payload);
    return OkStatus();
  });
  if (!replay) return tl::unexpected(replay.error());
  return records;
}

void WriteAt(const std::filesystem::path& path, uint64_t offset, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

TEST_F(StoreTest, SegmentsArePreallocatedAndTheirZerosEndTheRecords) {
  const std::filesystem::path log_dir = dir_ / "log";
  const std::filesystem::path first = log_dir / "0000000000000001.log";
  const std::filesystem::path second = log_dir / "0000000000000002.log";
  std::vector<std::string> written;
  {
    auto log = CommitLog::Create(log_dir.string(), 1);
    ASSERT_TRUE(log.has_value());
    // Enough bytes to cross several preallocation steps, with records of varied sizes.
    for (int i = 0; i < 400; ++i) {
      written.push_back(std::string(static_cast<size_t>(1 + (i * 977) % 4000), char('a' + i % 26)));
      ASSERT_TRUE((*log)->Append(written.back(), i % 50 == 0).has_value());
    }
    EXPECT_GT(std::filesystem::file_size(first), (*log)->segment_bytes());
    ASSERT_TRUE((*log)->Rotate().has_value());
    written.push_back("in the second segment");
    ASSERT_TRUE((*log)->Append(written.back(), true).has_value());
    // Nothing grows the file while appends stay within the zeros written ahead.
    EXPECT_GT(std::filesystem::file_size(second), (*log)->segment_bytes());
  }
  auto records = ReplayAll(log_dir);
  ASSERT_TRUE(records.has_value()) << records.error().message;
  EXPECT_EQ(*records, written);

  // After the zeros that end an older segment's records only zeros may follow.
  WriteAt(first, std::filesystem::file_size(first) - 1, "x");
  records = ReplayAll(log_dir);
  ASSERT_FALSE(records.has_value());
  EXPECT_EQ(records.error().code, ErrorCode::kCorruption);
  WriteAt(first, std::filesystem::file_size(first) - 1, std::string_view("\0", 1));

  // In the newest segment a byte after the zeros is a torn tail (a later page that reached
  // the disk before an earlier one): cut off, the records before it kept.
  const uint64_t size = std::filesystem::file_size(second);
  WriteAt(second, size - 10, "torn");
  records = ReplayAll(log_dir);
  ASSERT_TRUE(records.has_value()) << records.error().message;
  EXPECT_EQ(*records, written);
  EXPECT_LT(std::filesystem::file_size(second), size);
}

TEST_F(StoreTest, IgnoresFilesThatAreNotSegments) {
  const std::filesystem::path log_dir = dir_ / "log";
  std::filesystem::create_directories(log_dir);
  {
    auto log = CommitLog::Create(log_dir.string(), 2);
    ASSERT_TRUE(log.has_value());
    ASSERT_TRUE((*log)->Append("only", true).has_value());
  }
  // Names of a segment's length that are not numbers.
  for (const char* name : {"0000000000000abc.log", "segment-one-xyz!.log"}) {
    const int fd = ::open((log_dir / name).c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "junk", 4), 4);
    ::close(fd);
  }
  std::vector<std::string> records;
  auto replay = CommitLog::Replay(log_dir.string(), 1, [&](std::string_view payload) {
    records.emplace_back(payload);
    return OkStatus();
  });
  ASSERT_TRUE(replay.has_value()) << replay.error().message;
  EXPECT_EQ(*replay, 2u);
  EXPECT_EQ(records, std::vector<std::string>{"only"});
  CommitLog::DropSegmentsBefore(log_dir.string(), 3);
  EXPECT_FALSE(std::filesystem::exists(log_dir / "0000000000000002.log"));
  EXPECT_TRUE(std::filesystem::exists(log_dir / "0000000000000abc.log"));
  EXPECT_TRUE(std::filesystem::exists(log_dir / "segment-one-xyz!.log"));
}

}  // namespace
}  // namespace tally::storage
