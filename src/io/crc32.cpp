// CRC-32 (zlib's: the reflected polynomial 0xEDB88320, inverted in and out)
// of large buffers by carry-less multiplication: 64 bytes are folded into a
// 512-bit remainder per step with PCLMULQDQ, then reduced to 32 bits by
// Barrett reduction (the method of Gopal et al., "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ Instruction", Intel, 2009). It gives
// zlib's value (Python's zlib.crc32 reads the same checksums) at several
// times zlib's speed, which matters where a checkpoint's checksums share a
// small machine's cores with the write itself. Elsewhere: zlib.
#include "geotrain/io/crc32.hpp"

#include <zlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GEOTRAIN_CRC32_CLMUL 1
#endif

namespace geotrain::io {
namespace {

std::uint32_t zlib_crc32(std::uint32_t crc, const unsigned char* bytes, std::size_t count) {
  return static_cast<std::uint32_t>(crc32_z(crc, bytes, count));
}

#ifdef GEOTRAIN_CRC32_CLMUL

// x^n mod P in the reflected bit order, for the folding constants: bit i of
// the result is the coefficient of x^(31 - i) (P = 0x104C11DB7).
std::uint64_t power_mod_p(unsigned n) {
  std::uint32_t r = 0x80000000u;  // x^0
  for (unsigned i = 0; i < n; ++i) r = (r >> 1) ^ ((r & 1u) ? 0xEDB88320u : 0u);
  return r;
}

// The folding constants as a reflected 33-bit value (x^n mod P shifted left
// by one: the product of two reflected 64-bit operands is one bit short).
std::uint64_t fold_constant(unsigned n) { return power_mod_p(n) << 1; }

// floor(x^64 / P), reflected (33 bits): Barrett's mu.
std::uint64_t barrett_mu() {
  // Long division of x^64 by P in the normal order; its first step (x^64
  // minus x^32 P) leaves 64 bits.
  std::uint64_t quotient = std::uint64_t{1} << 32;
  std::uint64_t remainder = std::uint64_t{0x04C11DB7} << 32;
  for (int bit = 31; bit >= 0; --bit) {
    if ((remainder >> (bit + 32)) & 1u) {
      remainder ^= std::uint64_t{0x104C11DB7} << bit;
      quotient |= std::uint64_t{1} << bit;
    }
  }
  std::uint64_t reflected = 0;
  for (int i = 0; i <= 32; ++i) reflected |= ((quotient >> i) & 1u) << (32 - i);
  return reflected;
}

struct Constants {
  __m128i fold512, fold128, mu_and_p;
  std::uint64_t fold64;
};

Constants make_constants() {
  Constants k;
  // Folding a 128-bit lane forward over D bits: its low half times
  // x^(D+32) and its high half times x^(D-32) (mod P, reflected; the
  // reflected product lands 32 bits lower); D = 512 (4 lanes) or 128.
  k.fold512 = _mm_set_epi64x(static_cast<long long>(fold_constant(512 - 32)),
                             static_cast<long long>(fold_constant(512 + 32)));
  k.fold128 = _mm_set_epi64x(static_cast<long long>(fold_constant(128 - 32)),
                             static_cast<long long>(fold_constant(128 + 32)));
  k.fold64 = fold_constant(64);
  k.mu_and_p = _mm_set_epi64x(static_cast<long long>(barrett_mu()), 0x1DB710641ll);
  return k;
}

__attribute__((target("pclmul,sse4.1"))) __m128i fold(__m128i lane, __m128i constant, __m128i next) {
  const __m128i low = _mm_clmulepi64_si128(lane, constant, 0x00);
  const __m128i high = _mm_clmulepi64_si128(lane, constant, 0x11);
  return _mm_xor_si128(_mm_xor_si128(low, high), next);
}

__attribute__((target("pclmul,sse4.1"))) __m128i load(const unsigned char* at) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
}

// The raw (not inverted) remainder of `count` bytes (a multiple of 16, at
// least 64) after the raw state `crc`.
__attribute__((target("pclmul,sse4.1"))) std::uint32_t clmul_crc32(std::uint32_t crc, const unsigned char* bytes,
                                                                   std::size_t count) {
  static const Constants k = make_constants();
  __m128i x0 = _mm_xor_si128(load(bytes), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x1 = load(bytes + 16), x2 = load(bytes + 32), x3 = load(bytes + 48);
  bytes += 64, count -= 64;
  for (; count >= 64; bytes += 64, count -= 64) {
    x0 = fold(x0, k.fold512, load(bytes));
    x1 = fold(x1, k.fold512, load(bytes + 16));
    x2 = fold(x2, k.fold512, load(bytes + 32));
    x3 = fold(x3, k.fold512, load(bytes + 48));
  }
  __m128i x = fold(fold(fold(x0, k.fold128, x1), k.fold128, x2), k.fold128, x3);
  for (; count >= 16; bytes += 16, count -= 16) x = fold(x, k.fold128, load(bytes));
  // 128 -> 96 bits: the low half, times x^96, onto the high half.
  const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
  x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, k.fold128, 0x10));
  // 96 -> 64 bits: the low 32 bits, times x^64, onto the rest.
  const __m128i fold64 = _mm_set_epi64x(0, static_cast<long long>(k.fold64));
  x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, mask32), fold64, 0x00));
  // Barrett reduction of the 64-bit remainder to 32 bits.
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), k.mu_and_p, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), k.mu_and_p, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(x, t), 1));
}

bool clmul_available() {
  static const bool available = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return available;
}

#endif

}  // namespace

std::uint32_t crc32_of_bytes(const void* data, std::size_t count) {
  const auto* bytes = static_cast<const unsigned char*>(data);
#ifdef GEOTRAIN_CRC32_CLMUL
  if (count >= 64 && clmul_available()) {
    const std::size_t folded = count & ~std::size_t{15};
    const std::uint32_t crc = ~clmul_crc32(0xFFFFFFFFu, bytes, folded);
    return zlib_crc32(crc, bytes + folded, count - folded);
  }
#endif
  return zlib_crc32(0, bytes, count);
}

std::uint32_t crc32_of_bytes_by_zlib(const void* data, std::size_t count) {
  return zlib_crc32(0, static_cast<const unsigned char*>(data), count);
}

}  // namespace geotrain::io
