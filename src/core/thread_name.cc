#include "core/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>

namespace tally {

void NameThisThread(std::string_view name) {
  char cut[16];
  const size_t length = std::min(name.size(), sizeof cut - 1);
  std::memcpy(cut, name.data(), length);
  cut[length] = '\0';
  pthread_setname_np(pthread_self(), cut);
}

}  // namespace tally
