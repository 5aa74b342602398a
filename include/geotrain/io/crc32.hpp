// zlib's CRC-32 of a buffer (what a checkpoint tensor's crc32 attribute
// holds), by carry-less multiplication where the CPU has it (src/io/crc32.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace geotrain::io {

// crc32(0, data, count) as zlib computes it, faster.
std::uint32_t crc32_of_bytes(const void* data, std::size_t count);
// The same by zlib itself (the reference the fast one is tested against).
std::uint32_t crc32_of_bytes_by_zlib(const void* data, std::size_t count);

}  // namespace geotrain::io
