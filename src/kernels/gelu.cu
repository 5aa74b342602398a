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
// matmul_gelu_forward/backward: the MLP's first projection with bias + GELU as
// one epilogue kernel after the cuBLAS GEMM (the CUDA emulation maps cuBLAS,
// not cuBLASLt, so no cuBLASLt GELU_AUX_BIAS epilogue), and dgelu fused with
// the bias-gradient column sums before the backward GEMMs.
#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "op_constants.hpp"

#include <stdexcept>

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

__device__ __forceinline__ float gelu_derivative(float x) {
  const float s = half_one_plus_tanh(gelu_u(x));
  const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du_dx;
}

// The epilogue after the bias-less GEMM: one read of the GEMM's output, the
// biased pre-activation and its GELU written, where add_bias_kernel and
// gelu_forward_kernel read and wrote it twice.
__global__ void bias_gelu_kernel(float* out, float* pre, const float* bias, int OC, std::size_t total) {
  for (std::size_t i = global_index(); i < total; i += global_stride()) {
    const float x = pre[i] + bias[i % OC];
    pre[i] = x;
    out[i] = x * half_one_plus_tanh(gelu_u(x));
  }
}

// The bias gradient's partials of dpre = dout * gelu'(pre), written as they
// are summed (column_chunk_partials): no zero fill, no gelu_backward pass and
// no separate column-sum read of dpre.
__global__ void dgelu_bias_partials_kernel(float* partial, float* dpre, const float* dout, const float* pre, int rows,
                                           int cols, int chunks) {
  column_chunk_partials(partial, rows, cols, chunks, [=](std::size_t i) {
    const float d = dout[i] * gelu_derivative(pre[i]);
    dpre[i] = d;
    return d;
  });
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

void matmul_gelu_forward(const Context& ctx, float* out, float* pre, const float* inp, const float* weight,
                         const float* bias, int N, int C, int OC) {
  if (bias == nullptr) throw std::invalid_argument("matmul_gelu_forward: bias is required");
  matmul_forward(ctx, pre, inp, weight, nullptr, N, C, OC);
  const std::size_t total = static_cast<std::size_t>(N) * OC;
  if (total == 0) return;
  bias_gelu_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, ctx.stream>>>(out, pre, bias, OC, total);
  GT_CUDA_CHECK_LAUNCH();
}

void matmul_gelu_backward(const Context& ctx, float* dinp, float* dweight, float* dbias, float* dpre,
                          const float* dout, const float* pre, const float* inp, const float* weight, int N, int C,
                          int OC) {
  if (N == 0 || OC == 0) return;
  const int chunks = static_cast<int>(ceil_div(N, kColumnSumRows));
  float* partial = ctx.work->partials.get<float>(static_cast<std::size_t>(chunks) * OC, ctx.stream);
  const dim3 block(kColumnTile, kColumnRowLanes);
  const dim3 grid(ceil_div(OC, kColumnTile), std::min(chunks, kMaxGridY));
  dgelu_bias_partials_kernel<<<grid, block, 0, ctx.stream>>>(partial, dpre, dout, pre, N, OC, chunks);
  GT_CUDA_CHECK_LAUNCH();
  if (dbias != nullptr) column_partials_accumulate(ctx, dbias, partial, chunks, OC);
  matmul_backward(ctx, dinp, dweight, nullptr, dpre, inp, weight, N, C, OC);
}

}  // namespace geotrain::kernels::cuda
