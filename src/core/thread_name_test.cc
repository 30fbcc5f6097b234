#include "core/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace tally {
namespace {

std::string NameOfThisThread() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return name;
}

TEST(ThreadNameTest, AThreadNamesItselfAndALongNameIsCutAtFifteenBytes) {
  std::string short_name, long_name;
  std::thread([&] {
    NameThisThread("log p3");
    short_name = NameOfThisThread();
    NameThisThread("a name longer than fifteen bytes");
    long_name = NameOfThisThread();
  }).join();
  EXPECT_EQ(short_name, "log p3");
  EXPECT_EQ(long_name, "a name longer t");
}

TEST(ThreadNameTest, ANamedThreadHasItsNameBeforeItsBodyRuns) {
  std::string seen;
  NamedThread("follow p12", [&seen] { seen = NameOfThisThread(); }).join();
  EXPECT_EQ(seen, "follow p12");
}

}  // namespace
}  // namespace tally
