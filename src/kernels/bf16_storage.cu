// bf16 storage of fp32 values: to_bf16 rounds to nearest, ties to even
// (__float2bfloat16_rn, what the CPU twin's round_to_bf16 does) and keeps the
// 16-bit pattern; from_bf16 widens it back, exactly. The bf16 GEMM operands
// (matmul.cu) are made by the same kernel.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"

namespace geotrain::kernels::cuda {
namespace {

__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* in, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void from_bf16_kernel(float* out, const __nv_bfloat16* in, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) out[i] = __bfloat162float(in[i]);
}

}  // namespace

void to_bf16(const Context& ctx, std::uint16_t* out, const float* in, std::size_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(
      reinterpret_cast<__nv_bfloat16*>(out), in, n);
  GT_CUDA_CHECK_LAUNCH();
}

void from_bf16(const Context& ctx, float* out, const std::uint16_t* in, std::size_t n) {
  if (n == 0) return;
  from_bf16_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(
      out, reinterpret_cast<const __nv_bfloat16*>(in), n);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
