// CRC-32C (Castagnoli), the checksum of tally's log records.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tally {

uint32_t Crc32c(const void* data, size_t length, uint32_t crc = 0);

}  // namespace tally
