// Fixtures the derived layer's tests share. EngineStoreTest: an Engine over a real
// RocksDbStore in a temporary directory of the test's own, with a ManualClock, reopened at
// will (Restart) to check what survives. CatalogStoreTest adds a Catalog (not loaded) for
// the tests of the parts; DerivedStoreTest adds a loaded DerivedCounters.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/test_dir.h"
#include "engine/definitions/parser.h"
#include "engine/derived/derived_counters.h"
#include "storage/rocksdb_store.h"

namespace tally::derived {

class EngineStoreTest : public ::testing::Test {
 protected:
  // `dir_prefix` names the temporary directory (the test's name follows); the clock starts
  // at `now_ms`.
  EngineStoreTest(std::string_view dir_prefix, int64_t now_ms)
      : clock_(now_ms), dir_prefix_(dir_prefix) {}

  void SetUp() override {
    dir_ = testing::TestDirectory(dir_prefix_);
    std::filesystem::remove_all(dir_);
    Open();
  }
  void TearDown() override {
    Close();
    std::filesystem::remove_all(dir_);
  }

  // Opens the store and starts the engine; a fixture that adds parts opens them after.
  virtual void Open() {
    auto store = storage::RocksDbStore::Open({.path = dir_.string()});
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
    engine::EngineOptions options;
    options.clock = &clock_;
    engine_ = std::make_unique<engine::Engine>(store_.get(), options);
    ASSERT_TRUE(engine_->Start());
  }
  // Stops the engine and closes the store; a fixture that adds parts closes them first.
  virtual void Close() {
    if (engine_) engine_->Stop();
    engine_.reset();
    store_.reset();
  }
  void Restart() {
    Close();
    Open();
  }

  std::filesystem::path dir_;
  ManualClock clock_;
  std::unique_ptr<storage::RocksDbStore> store_;
  std::unique_ptr<engine::Engine> engine_;

 private:
  const std::string dir_prefix_;
};

class CatalogStoreTest : public EngineStoreTest {
 protected:
  using EngineStoreTest::EngineStoreTest;

  void Open() override {
    EngineStoreTest::Open();
    if (HasFatalFailure()) return;
    keyspace_ = std::make_unique<DerivedKeyspace>(*engine_, *store_);
    catalog_ = std::make_unique<Catalog>(*store_, *keyspace_);
  }
  void Close() override {
    catalog_.reset();
    keyspace_.reset();
    EngineStoreTest::Close();
  }

  // Runs the DDL of `script`; counters created on source `streamed` start pending.
  void Define(std::string_view script, std::string_view streamed = "") {
    auto statements = definitions::ParseScript(script);
    ASSERT_TRUE(statements) << statements.error().message;
    for (const definitions::Statement& statement : *statements) {
      auto done =
          catalog_->Execute(statement, [&](std::string_view source) { return source == streamed; });
      ASSERT_TRUE(done) << done.error().message;
    }
  }

  std::unique_ptr<DerivedKeyspace> keyspace_;
  std::unique_ptr<Catalog> catalog_;
};

class DerivedStoreTest : public EngineStoreTest {
 protected:
  // `options` are the DerivedCounters' at every Open.
  DerivedStoreTest(std::string_view dir_prefix, int64_t now_ms, DerivedOptions options)
      : EngineStoreTest(dir_prefix, now_ms), options_(options) {}

  void Open() override {
    EngineStoreTest::Open();
    if (HasFatalFailure()) return;
    derived_ = std::make_unique<DerivedCounters>(*engine_, *store_, options_);
    auto loaded = derived_->Load();
    ASSERT_TRUE(loaded) << loaded.error().message;
  }
  void Close() override {
    derived_.reset();
    EngineStoreTest::Close();
  }

  void Define(std::string_view sql) {
    auto outcome = derived_->Execute(sql);
    ASSERT_TRUE(outcome) << outcome.error().message;
  }

  // The value of a canonical key (0 when missing).
  int64_t Value(const std::string& key) {
    uint64_t epoch = 0;
    return derived_->Get({&key, 1}, &epoch)[0];
  }

  std::unique_ptr<DerivedCounters> derived_;
  ChangeDecoder decoder_;

 private:
  const DerivedOptions options_;
};

}  // namespace tally::derived
