// GELU, tanh approximation (as GPT-2), forward and backward.
//   u = sqrt(2/pi) * (x + 0.044715 x^3)
//   forward:  out = 0.5 x (1 + tanh u)
//   backward: dinp += dout * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2))
// Element-wise, grid-stride; tanhf (not the fast intrinsic) for parity with the
// CPU twin; the constants are the twin's (op_constants.hpp).
#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "op_constants.hpp"

namespace geotrain::kernels::cuda {
namespace {

__global__ void gelu_forward_kernel(float* out, const float* inp, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += local * dout[i];
  }
}

}  // namespace

void gelu_forward(const Context& ctx, float* out, const float* inp, std::size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(out, inp, n);
  GEOTRAIN_CUDA_CHECK_LAUNCH();
}

void gelu_backward(const Context& ctx, float* dinp, const float* inp, const float* dout, std::size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(dinp, inp, dout, n);
  GEOTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
