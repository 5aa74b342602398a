// GELU, tanh approximation exactly as GPT-2, CPU twin.
//   forward:  gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   backward: dinp += dout * (0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx),
//             du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//
// Evaluated through the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) =
// sigmoid(2u), which makes the same function (this is not the different
// x * sigmoid(1.702 x) approximation):
//   gelu(x) = x * s,  gelu'(x) = s + 2 x s (1 - s) du/dx,  s = sigmoid(2u)
// (1 - tanh^2 = 4 s (1 - s)). Two reasons, measured on this project's CPUs:
// glibc's tanhf costs ~25 ns and its expf ~3 ns, so GELU runs ~4x faster;
// and 1 + tanh(u) cancels for negative x (float relative error up to 0.3 at
// x = -5) where 1 / (1 + exp(-2u)) keeps ~1e-6. For x << 0, exp(-2u)
// overflows to inf and s = 0 exactly: gelu = -0, gelu' = 0, no NaN.
//
// Also here: matmul_gelu_forward/backward, the MLP's first projection with
// the bias and GELU fused into one pass after the GEMM (and dgelu with the
// bias gradient in one pass before the backward GEMMs).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "cpu_math.hpp"
#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"
#include "op_constants.hpp"

namespace geotrain::kernels::cpu {
namespace {

float gelu_u(float x) { return kGeluScale * (x + kGeluCubic * x * x * x); }

// sigmoid(2u) = 0.5 (1 + tanh(u))
// exp_vectorisable (cpu_math.hpp) rather than std::exp: the loops below then
// run as SIMD instead of one libm call per element.
float half_one_plus_tanh(float u) { return 1.0f / (1.0f + exp_vectorisable(-2.0f * u)); }

// The element loops, on [first, last): SIMD (exp_vectorisable inlines), and
// built for AVX2 too (GEOTRAIN_SIMD_CLONES in cpu_math.hpp).
GEOTRAIN_SIMD_CLONES void gelu_forward_range(float* out, const float* inp, std::size_t first,
                                             std::size_t last) {
#pragma omp simd
  for (std::size_t i = first; i < last; ++i) {
    const float x = inp[i];
    out[i] = x * half_one_plus_tanh(gelu_u(x));
  }
}

GEOTRAIN_SIMD_CLONES void gelu_backward_range(float* dinp, const float* inp, const float* dout,
                                              std::size_t first, std::size_t last) {
#pragma omp simd
  for (std::size_t i = first; i < last; ++i) {
    const float x = inp[i];
    const float s = half_one_plus_tanh(gelu_u(x));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += dout[i] * (s + 2.0f * x * s * (1.0f - s) * du_dx);
  }
}

// The fused epilogue of matmul_gelu_forward on one row: the bias add and
// GELU in the pass that reads the GEMM's output once.
GEOTRAIN_SIMD_CLONES void bias_gelu_row(float* out, float* pre, const float* bias, int OC) {
#pragma omp simd
  for (int c = 0; c < OC; ++c) {
    const float x = pre[c] + bias[c];
    pre[c] = x;
    out[c] = x * half_one_plus_tanh(gelu_u(x));
  }
}

// matmul_gelu_backward's pass on one row: dpre is written and added to the
// row chunk's bias sums while it is in registers.
GEOTRAIN_SIMD_CLONES void dgelu_bias_row(float* dpre, float* sums, const float* dout, const float* pre, int OC) {
#pragma omp simd
  for (int c = 0; c < OC; ++c) {
    const float x = pre[c];
    const float s = half_one_plus_tanh(gelu_u(x));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const float d = dout[c] * (s + 2.0f * x * s * (1.0f - s) * du_dx);
    dpre[c] = d;
    sums[c] += d;
  }
}

// Rows per partial bias sum in matmul_gelu_backward, as in the CUDA kernel.
constexpr int kRowsPerChunk = 128;

// Elements per parallel task: whole SIMD vectors, and enough tasks to balance.
constexpr std::size_t kChunk = 8192;

}  // namespace

void gelu_forward(float* out, const float* inp, std::size_t n) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t c = 0; c < chunks; ++c) {
    gelu_forward_range(out, inp, c * kChunk, std::min(n, (c + 1) * kChunk));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t c = 0; c < chunks; ++c) {
    gelu_backward_range(dinp, inp, dout, c * kChunk, std::min(n, (c + 1) * kChunk));
  }
}

// The GEMM without its bias, then one epilogue pass: the separate
// matmul_forward (bias pass) + gelu_forward read and write the N x OC
// pre-activation once more. The bias add happens after the GEMM's sum either
// way (sgemm with beta = 1 adds the product onto the bias rows), so the
// pre-activation is the one matmul_forward computes.
void matmul_gelu_forward(float* out, float* pre, const float* inp, const float* weight, const float* bias, int N,
                         int C, int OC, MatmulPrecision precision) {
  if (bias == nullptr) throw std::invalid_argument("matmul_gelu_forward: bias is required");
  matmul_forward(pre, inp, weight, nullptr, N, C, OC, precision);
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * OC))
  for (int row = 0; row < N; ++row) {
    const std::ptrdiff_t offset = static_cast<std::ptrdiff_t>(row) * OC;
    bias_gelu_row(out + offset, pre + offset, bias, OC);
  }
}

// dpre and the bias gradient in one pass over the rows, where gelu_backward
// into a zeroed buffer and matmul_backward's bias sum took three passes and a
// fill. The CUDA kernel's scheme: fixed chunks of rows, each summed in row
// order into its own partial vector (rows are read contiguously; walking
// column blocks instead strides a page per row and measured slower), the
// partials then added in chunk order - independent of the thread count. The
// bias sum is fp32 in that order, not sgemv's: it moves at rounding level
// against the unfused pair.
void matmul_gelu_backward(float* dinp, float* dweight, float* dbias, float* dpre, const float* dout,
                          const float* pre, const float* inp, const float* weight, int N, int C, int OC,
                          MatmulPrecision precision) {
  const int chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<float> partial(static_cast<std::size_t>(chunks) * OC, 0.0f);
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * OC))
  for (int chunk = 0; chunk < chunks; ++chunk) {
    float* sums = partial.data() + static_cast<std::ptrdiff_t>(chunk) * OC;
    const int row_end = std::min(N, (chunk + 1) * kRowsPerChunk);
    for (int row = chunk * kRowsPerChunk; row < row_end; ++row) {
      const std::ptrdiff_t offset = static_cast<std::ptrdiff_t>(row) * OC;
      dgelu_bias_row(dpre + offset, sums, dout + offset, pre + offset, OC);
    }
  }
  if (dbias != nullptr) {
    for (int c = 0; c < OC; ++c) {
      float sum = 0.0f;
      for (int chunk = 0; chunk < chunks; ++chunk) sum += partial[static_cast<std::size_t>(chunk) * OC + c];
      dbias[c] += sum;
    }
  }
  matmul_backward(dinp, dweight, nullptr, dpre, inp, weight, N, C, OC, precision);
}

}  // namespace geotrain::kernels::cpu
