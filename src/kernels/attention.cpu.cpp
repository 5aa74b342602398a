// Causal multi-head self-attention, CPU twin.
// qkv[B,T,3C] holds q | k | v per token, each C = NH heads x hs channels.
//   forward:  att[b,h,t,:] = softmax over t2 <= t of (q_t . k_t2) / sqrt(hs)
//             (0 above the diagonal); out[b,t,h] = sum_t2 att[t,t2] v_t2
//   backward: dv_t2 += att[t,t2] dout_t;  datt[t,t2] = dout_t . v_t2
//             dpre[t,t2] = att[t,t2] (datt[t,t2] - sum_j att[t,j] datt[t,j])
//             dq_t += dpre[t,t2] k_t2 / sqrt(hs);  dk_t2 += dpre[t,t2] q_t / sqrt(hs)
// Plain loops, not GEMMs: at GPT-2 sizes per head (hs = 64) the triangular
// products are small, and loops keep the causal mask free.
#include <cmath>
#include <cstddef>
#include <limits>

#include "cpu_math.hpp"
#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"

namespace geotrain::kernels::cpu {
namespace {

// GEOTRAIN_SIMD_CLONES (cpu_math.hpp): the per-row / per-head bodies are also
// built for AVX2 + FMA; with hs = 32..64 the inner loops are only 4-16 SSE
// vectors long, and AVX2 halves that.

// Pointers into one (batch, head) slice of the packed qkv / out tensors.
struct HeadView {
  const float* qkv;  // qkv + b*T*3C + h*hs: add t*3C for token t's q, + C for k, + 2C for v
  int C;
  int hs;
  const float* q(int t) const { return qkv + static_cast<std::ptrdiff_t>(t) * 3 * C; }
  const float* k(int t) const { return q(t) + C; }
  const float* v(int t) const { return q(t) + 2 * C; }
};

// The simd reduction lets the compiler keep several partial sums (a float
// reduction is otherwise summed strictly in order, one add latency per
// element); attention forward ran ~1.7x faster with it at GPT-2 124M shapes
// (B=4, T=256). The order is fixed at compile time: results stay the same
// from run to run and for any thread count.
float dot(const float* x, const float* y, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

// One query row: scores, max-subtracted softmax into att_row[0..T), then
// the weighted sum of values into out.
GEOTRAIN_SIMD_CLONES void attend_row(float* out, float* att_row, const HeadView& head, int t, int T, float scale) {
  float max_score = -std::numeric_limits<float>::infinity();
  for (int t2 = 0; t2 <= t; ++t2) {
    const float score = dot(head.q(t), head.k(t2), head.hs) * scale;
    att_row[t2] = score;
    if (score > max_score) max_score = score;
  }
  // Vectorised exp (cpu_math.hpp) and a simd sum: the order is fixed at
  // compile time, as in dot(), so results do not depend on the thread count.
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int t2 = 0; t2 <= t; ++t2) {
    att_row[t2] = exp_vectorisable(att_row[t2] - max_score);
    sum += att_row[t2];
  }
  const float inverse = 1.0f / sum;  // sum >= 1: the row's maximum contributes exp(0)
  for (int t2 = 0; t2 <= t; ++t2) att_row[t2] *= inverse;
  for (int t2 = t + 1; t2 < T; ++t2) att_row[t2] = 0.0f;

  // `omp simd` here and in the backward: out / dq / dk / dv never overlap
  // the rows they read (different thirds of qkv, or different tensors), but
  // the compiler cannot prove it and otherwise keeps these loops scalar or
  // behind runtime alias checks. Element-wise loops: no reordering of sums.
  for (int i = 0; i < head.hs; ++i) out[i] = 0.0f;
  for (int t2 = 0; t2 <= t; ++t2) {
    const float* v = head.v(t2);
    const float a = att_row[t2];
#pragma omp simd
    for (int i = 0; i < head.hs; ++i) out[i] += a * v[i];
  }
}

// One (batch, head) slice. Row t adds into dk and dv of every t2 <= t, so
// the slice is one task: all its writes stay in one thread.
GEOTRAIN_SIMD_CLONES void attention_backward_head(float* dqkv_head, float* datt, const float* dout_head, const HeadView& head,
                             const float* att, int T, float scale) {
  const int C = head.C, hs = head.hs;
  auto dq = [&](int t) { return dqkv_head + static_cast<std::ptrdiff_t>(t) * 3 * C; };
  for (int t = 0; t < T; ++t) {
    const float* att_row = att + static_cast<std::ptrdiff_t>(t) * T;
    float* datt_row = datt + static_cast<std::ptrdiff_t>(t) * T;
    const float* dout_t = dout_head + static_cast<std::ptrdiff_t>(t) * C;

    // Through the weighted sum: d(att) and d(v).
    for (int t2 = 0; t2 <= t; ++t2) {
      datt_row[t2] = dot(dout_t, head.v(t2), hs);
      float* dv = dq(t2) + 2 * C;
      const float a = att_row[t2];
#pragma omp simd
      for (int i = 0; i < hs; ++i) dv[i] += a * dout_t[i];
    }
    // Through the softmax, in place: datt_row becomes d(scores).
    const float weighted = dot(att_row, datt_row, t + 1);
    for (int t2 = 0; t2 <= t; ++t2) datt_row[t2] = att_row[t2] * (datt_row[t2] - weighted);
    for (int t2 = t + 1; t2 < T; ++t2) datt_row[t2] = 0.0f;
    // Through the scaled dot products: d(q) and d(k).
    float* dq_t = dq(t);
    const float* q_t = head.q(t);
    for (int t2 = 0; t2 <= t; ++t2) {
      const float g = datt_row[t2] * scale;
      const float* k = head.k(t2);
      float* dk = dq(t2) + C;
#pragma omp simd
      for (int i = 0; i < hs; ++i) {
        dq_t[i] += g * k[i];
        dk[i] += g * q_t[i];
      }
    }
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(B) * NH * T;  // (b, h, t) flattened
  const std::size_t work = static_cast<std::size_t>(rows) * T * hs;
#pragma omp parallel for schedule(dynamic, 16) if (worth_parallel(work))
  for (std::ptrdiff_t row = 0; row < rows; ++row) {
    // Causal rows differ in length (t + 1 keys): dynamic scheduling balances them.
    const int t = static_cast<int>(row % T);
    const int h = static_cast<int>((row / T) % NH);
    const int b = static_cast<int>(row / (static_cast<std::ptrdiff_t>(T) * NH));
    const HeadView head{qkv + static_cast<std::ptrdiff_t>(b) * T * 3 * C + h * hs, C, hs};
    float* out_row = out + (static_cast<std::ptrdiff_t>(b) * T + t) * C + h * hs;
    attend_row(out_row, att + row * T, head, t, T, scale);
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                        int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int slices = B * NH;
  const std::size_t work = static_cast<std::size_t>(slices) * T * T * hs;
#pragma omp parallel for schedule(static) if (worth_parallel(work))
  for (int slice = 0; slice < slices; ++slice) {
    const int b = slice / NH, h = slice % NH;
    const std::ptrdiff_t token0 = static_cast<std::ptrdiff_t>(b) * T;
    const std::ptrdiff_t square = static_cast<std::ptrdiff_t>(slice) * T * T;
    const HeadView head{qkv + token0 * 3 * C + h * hs, C, hs};
    attention_backward_head(dqkv + token0 * 3 * C + h * hs, datt + square, dout + token0 * C + h * hs,
                            head, att + square, T, scale);
  }
}

}  // namespace geotrain::kernels::cpu
