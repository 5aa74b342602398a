// GELU, tanh approximation (as GPT-2), forward and backward.
//   u = sqrt(2/pi) * (x + 0.044715 x^3)
//   forward:  out = 0.5 x (1 + tanh u)
//   backward: dinp += dout * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2))
// Evaluated exactly as the CPU twin (gelu.cpu.cpp) does, through
// 0.5 (1 + tanh u) = sigmoid(2u) = 1 / (1 + exp(-2u)) and 1 - tanh^2 u =
// 4 s (1 - s):  gelu = x s,  gelu' = s + 2 x s (1 - s) du/dx.
// 1 + tanhf(u) cancels for negative x (relative error up to ~0.3 at x = -5,
// where tanh u rounds to within an ulp of -1); the sigmoid form keeps ~1e-6.
// For x << 0, expf(-2u) overflows to inf and s = 0 exactly: gelu = -0,
// gelu' = 0, no NaN. expf (not the fast intrinsic); the constants are the
// twin's (op_constants.hpp).
#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "op_constants.hpp"

namespace geotrain::kernels::cuda {
namespace {

__device__ __forceinline__ float gelu_u(float x) { return kGeluScale * (x + kGeluCubic * x * x * x); }

// sigmoid(2u) = 0.5 (1 + tanh(u))
__device__ __forceinline__ float half_one_plus_tanh(float u) { return 1.0f / (1.0f + expf(-2.0f * u)); }

__global__ void gelu_forward_kernel(float* out, const float* inp, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float x = inp[i];
    out[i] = x * half_one_plus_tanh(gelu_u(x));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float x = inp[i];
    const float s = half_one_plus_tanh(gelu_u(x));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += dout[i] * (s + 2.0f * x * s * (1.0f - s) * du_dx);
  }
}

}  // namespace

void gelu_forward(const Context& ctx, float* out, const float* inp, std::size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(out, inp, n);
  GT_CUDA_CHECK_LAUNCH();
}

void gelu_backward(const Context& ctx, float* dinp, const float* inp, const float* dout, std::size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(dinp, inp, dout, n);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
