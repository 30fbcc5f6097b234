#include "core/crc32c.h"

#include <array>

namespace tally {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

}  // namespace

uint32_t Crc32c(const void* data, size_t length, uint32_t crc) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__SSE4_2__) || defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) {
    size_t i = 0;
    for (; i + 8 <= length; i += 8) {
      uint64_t word;
      __builtin_memcpy(&word, bytes + i, 8);
      crc = static_cast<uint32_t>(__builtin_ia32_crc32di(crc, word));
    }
    for (; i < length; ++i) crc = __builtin_ia32_crc32qi(crc, bytes[i]);
    return ~crc;
  }
#endif
  for (size_t i = 0; i < length; ++i) crc = kTable[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace tally
