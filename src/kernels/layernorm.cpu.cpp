// LayerNorm over the last dimension, CPU twin.
//   forward:  out = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps)
//   backward: with n = (x - mean) * rstd and g = dout * weight,
//             dinp    += rstd * (g - mean(g) - n * mean(g * n))
//             dweight += sum over rows of dout * n;  dbias += sum of dout
// and the residual add fused in front of the forward (residual_layernorm_forward).
#include <cmath>
#include <cstddef>

#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"
#include "op_constants.hpp"

namespace geotrain::kernels::cpu {
namespace {

// Two passes (mean, then the mean of squared deviations) rather than
// E[x^2] - E[x]^2, which cancels catastrophically when |mean| >> std. The
// row sums are simd reductions (see attention.cpu.cpp's dot).
void normalize_row(float* out, float* mean_out, float* rstd_out, const float* x, const float* weight,
                   const float* bias, int C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; ++c) sum += x[c];
  const float mean = sum / static_cast<float>(C);
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int c = 0; c < C; ++c) {
    const float d = x[c] - mean;
    squares += d * d;
  }
  const float rstd = 1.0f / std::sqrt(squares / static_cast<float>(C) + kLayerNormEps);
  for (int c = 0; c < C; ++c) out[c] = (x[c] - mean) * rstd * weight[c] + bias[c];
  *mean_out = mean;
  *rstd_out = rstd;
}

void input_gradient_row(float* dinp, const float* dout, const float* x, const float* weight, float mean,
                        float rstd, int C) {
  float mean_g = 0.0f;
  float mean_gn = 0.0f;
#pragma omp simd reduction(+ : mean_g, mean_gn)
  for (int c = 0; c < C; ++c) {
    const float g = dout[c] * weight[c];
    mean_g += g;
    mean_gn += g * (x[c] - mean) * rstd;
  }
  mean_g /= static_cast<float>(C);
  mean_gn /= static_cast<float>(C);
  for (int c = 0; c < C; ++c) {
    const float n = (x[c] - mean) * rstd;
    dinp[c] += rstd * (dout[c] * weight[c] - mean_g - n * mean_gn);
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * C))
  for (int row = 0; row < N; ++row) {
    const std::ptrdiff_t offset = static_cast<std::ptrdiff_t>(row) * C;
    normalize_row(out + offset, mean + row, rstd + row, inp + offset, weight, bias, C);
  }
}

// The sum is stored row by row and normalize_row reads it back while the row
// (C floats) is still in L1: one pass over the residual stream in main memory
// instead of an add pass and a layernorm pass. The same adds in the same
// order as residual_forward then layernorm_forward, so bitwise the same result.
void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N, int C) {
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * C))
  for (int row = 0; row < N; ++row) {
    const std::ptrdiff_t offset = static_cast<std::ptrdiff_t>(row) * C;
    float* r = residual + offset;
    const float* x = a + offset;
    const float* y = b + offset;
    for (int c = 0; c < C; ++c) r[c] = x[c] + y[c];
    normalize_row(out + offset, mean + row, rstd + row, r, weight, bias, C);
  }
}

// Two loops: dinp is row-local (parallel over rows); dweight and dbias sum
// over rows (parallel over column blocks, so no thread shares a column).
// Re-reading inp and dout once more is cheaper than per-thread partial sums
// and keeps the result independent of the thread count.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * C))
  for (int row = 0; row < N; ++row) {
    const std::ptrdiff_t offset = static_cast<std::ptrdiff_t>(row) * C;
    input_gradient_row(dinp + offset, dout + offset, inp + offset, weight, mean[row], rstd[row], C);
  }
  for_each_column_block(C, static_cast<std::size_t>(N), [&](int first, int last) {
    // Sum this step's contribution first, then add it once: the running sum
    // does not absorb the (possibly much larger) gradient already there.
    float sum_w[kColumnBlock] = {};
    float sum_b[kColumnBlock] = {};
    for (int row = 0; row < N; ++row) {
      const std::ptrdiff_t offset = static_cast<std::ptrdiff_t>(row) * C;
      for (int c = first; c < last; ++c) {
        const float n = (inp[offset + c] - mean[row]) * rstd[row];
        sum_w[c - first] += dout[offset + c] * n;
        sum_b[c - first] += dout[offset + c];
      }
    }
    for (int c = first; c < last; ++c) {
      dweight[c] += sum_w[c - first];
      dbias[c] += sum_b[c - first];
    }
  });
}

}  // namespace geotrain::kernels::cpu
