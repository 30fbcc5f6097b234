// For tests: a temporary directory of their own, named after the running test rather than
// the process, so that a death test's child (gtest re-executes the binary) finds the one its
// parent prepared.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace tally::testing {

// True in the child process a death test (EXPECT_EXIT and the like) re-executes.
inline bool InDeathTestChild() { return !::testing::GTEST_FLAG(internal_run_death_test).empty(); }

// <temp dir>/<prefix><the running test's name>; neither created nor emptied.
inline std::filesystem::path TestDirectory(std::string_view prefix) {
  return std::filesystem::temp_directory_path() /
         (std::string(prefix) + ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

}  // namespace tally::testing
