// Internal: a branch-free expf that the compiler can vectorise.
//
// Why: glibc's expf is an out-of-line scalar call, so every loop that uses it
// (the softmax in attention forward, GELU forward and backward) ran one
// element at a time; in a profile of the tiny model's training (4 x 128) the
// expf calls alone took ~6% of the time and kept GELU and the softmax scalar.
// This version is inline, uses only multiplies, adds, compares and integer
// bit operations, and vectorises under `#pragma omp simd`.
//
// Method: exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 in
// [-ln2/2, ln2/2] (ln 2 split in two parts so r is exact to float precision),
// exp(r) by a degree-7 Taylor-like polynomial (the classic Cephes expf
// coefficients). Relative error is within ~2 ulp of the true value over the
// normal range - well inside the kernel tests' tolerances. Each element is a
// fixed sequence of operations: results do not depend on thread count or
// vector width.
//
// Range: x > 88.72 (exp overflows float) gives +inf, like expf (GELU relies on
// this for x << 0); x < -87 gives 0 where expf would give a value below
// 1.7e-38 (denormal or near it) - an absolute difference far below any
// tolerance, and softmax / sigmoid outputs are unchanged at float precision.
// NaN in gives NaN out.
#pragma once
#include <bit>
#include <cstdint>
#include <limits>

// Hot loop bodies marked GEOTRAIN_SIMD_CLONES are built twice, for x86-64-v3
// (AVX2 + FMA) and the baseline, and the loader picks one per machine (GCC
// function multi-versioning through ifunc): twice the vector width where
// the CPU has it, while the binary stays portable. The choice is fixed per
// machine, so results stay the same from run to run and for any thread count
// (the two versions may differ in the last bits: FMA contraction). OpenMP
// outlines parallel-loop bodies into separate functions that do not inherit
// the attribute, so a marked function must be called from inside the loop.
// GCC >= 12 only (the version this was checked with, the project's compiler), not
// under the sanitizers, where plain code is what the sanitizer presets test
// (an ifunc resolver runs before ThreadSanitizer is set up and crashes).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define GEOTRAIN_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GEOTRAIN_SIMD_CLONES
#endif

namespace geotrain::kernels::cpu {

inline float exp_vectorisable(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;        // exact in float, 9 bits of mantissa
  constexpr float kLn2Lo = -2.12194440e-4f;     // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;         // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kOverflow = 88.7228391f;      // log(FLT_MAX)
  constexpr float kUnderflow = -87.0f;          // keeps n >= -125 so 2^(n-1) below is normal

  const float xc = x < kUnderflow ? kUnderflow : (x > kOverflow ? kOverflow : x);
  // n = round(xc / ln 2), as a float and as an integer, without a libm call.
  const float shifted = xc * kLog2e + kRound;
  const float n = shifted - kRound;
  const std::int32_t ni = std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(kRound);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n as 2^(n-1) * 2: n reaches 128 near the overflow bound, whose 2^n is
  // not a float; the final doubling then overflows to inf exactly when it should.
  const float half_scale = std::bit_cast<float>(static_cast<std::int32_t>((ni + 126) << 23));
  float result = p * half_scale * 2.0f;
  if (x < kUnderflow) result = 0.0f;
  if (x > kOverflow) result = std::numeric_limits<float>::infinity();
  if (x != x) result = x;  // NaN
  return result;
}

// Round to nearest, ties to even, keeping the top 16 bits (sign, 8 exponent
// bits, 7 mantissa bits) - what __float2bfloat16_rn and torch's .bfloat16()
// do; subnormals are rounded, not flushed. Inline so that the loops over it
// (bf16 GEMM operands, bf16 storage) vectorise.
inline float round_to_bf16(float x) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    bits |= 0x00400000u;  // NaN: keep it a (quiet) NaN rather than round it to infinity
  } else {
    bits += 0x7fffu + ((bits >> 16) & 1u);
  }
  return std::bit_cast<float>(bits & 0xffff0000u);
}

}  // namespace geotrain::kernels::cpu
