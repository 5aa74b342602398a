// bf16 storage of fp32 values, CPU twin: a value's top 16 bits after rounding
// to nearest, ties to even (round_to_bf16, cpu_math.hpp), and back, which
// is exact.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "cpu_math.hpp"
#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"

namespace geotrain::kernels::cpu {

void to_bf16(std::uint16_t* out, const float* in, std::size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(round_to_bf16(in[i])) >> 16);
  }
}

void from_bf16(float* out, const std::uint16_t* in, std::size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(in[i]) << 16);
}

}  // namespace geotrain::kernels::cpu
