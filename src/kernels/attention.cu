// Causal multi-head self-attention with batched GEMMs, forward and backward.
// qkv[B,T,3C] (per token: q | k | v, each NH heads x HS = C/NH), out[B,T,C],
// att[B,NH,T,T] (softmax probabilities, 0 above the diagonal), scale 1/sqrt(HS).
//
//   forward:  q, k, v [B,NH,T,HS]  <- permute(qkv)
//             att = q k^T * scale            (strided batched GEMM, B*NH batches)
//             att = causal_softmax(att)      (one warp per row, in place)
//             y = att v;  out = unpermute(y)
//   backward: dy <- permute(dout); q, k, v <- permute(qkv)
//             datt = dy v^T;  dv = att^T dy
//             datt = scale * att * (datt - rowsum(att * datt))   (0 above the diagonal)
//             dq = datt k;  dk = datt^T q;  dqkv += unpermute(dq, dk, dv)
// The GEMMs compute full T x T products (the upper triangle is masked
// afterwards). In bf16 mode every GEMM operand (q, k, v, att, dy, datt) is
// rounded to bf16 and accumulated in fp32 (see matmul.cu); the softmax and its
// backward, att and datt stay fp32.
//
// Row-major [T,HS] per batch matrix is the column-major HS x T matrix (ld HS);
// row-major [T,T] is column-major T x T transposed (ld T). Hence:
//   att^T(col) = k(op T) q(op N):       gemm(T, N, m=T,  n=T, k=HS)
//   y^T        = v(op N) att^T(op N):   gemm(N, N, m=HS, n=T, k=T)
//   datt^T     = v(op T) dy(op N):      gemm(T, N, m=T,  n=T, k=HS)
//   dv^T       = dy(op N) att(op T):    gemm(N, T, m=HS, n=T, k=T)
//   dq^T       = k(op N) datt^T(op N):  gemm(N, N, m=HS, n=T, k=T)
//   dk^T       = q(op N) datt(op T):    gemm(N, T, m=HS, n=T, k=T)
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kRowsPerBlock = kRowThreads / kWarpSize;

// Where element i of a [B, NH, T, HS] tensor sits.
struct HeadPosition {
  std::size_t b, h, t, d;
};

__device__ inline HeadPosition head_position(std::size_t i, int T, int NH, int HS) {
  HeadPosition at;
  at.d = i % HS;
  i /= HS;
  at.t = i % T;
  i /= T;
  at.h = i % NH;
  at.b = i / NH;
  return at;
}

// qkv[B,T,3,NH,HS] -> parts[3][B,NH,T,HS] (q, then k, then v).
__global__ void split_heads_kernel(float* parts, const float* qkv, int B, int T, int NH, int HS) {
  const std::size_t C = static_cast<std::size_t>(NH) * HS;
  const std::size_t BTC = static_cast<std::size_t>(B) * T * C;
  for (std::size_t i = global_index(); i < 3 * BTC; i += global_stride()) {
    const std::size_t part = i / BTC;
    const HeadPosition at = head_position(i % BTC, T, NH, HS);
    parts[i] = qkv[(at.b * T + at.t) * 3 * C + part * C + at.h * HS + at.d];
  }
}

// y[B,NH,T,HS] -> out[B,T,NH*HS]  (overwrite)
__global__ void merge_heads_kernel(float* out, const float* y, int B, int T, int NH, int HS) {
  const std::size_t C = static_cast<std::size_t>(NH) * HS;
  const std::size_t BTC = static_cast<std::size_t>(B) * T * C;
  for (std::size_t i = global_index(); i < BTC; i += global_stride()) {
    const std::size_t c = i % C, bt = i / C;
    const std::size_t t = bt % T, b = bt / T;
    const std::size_t h = c / HS, d = c % HS;
    out[i] = y[((b * NH + h) * T + t) * HS + d];
  }
}

// dout[B,T,NH*HS] -> dy[B,NH,T,HS]
__global__ void split_gradient_kernel(float* dy, const float* dout, int B, int T, int NH, int HS) {
  const std::size_t C = static_cast<std::size_t>(NH) * HS;
  const std::size_t BTC = static_cast<std::size_t>(B) * T * C;
  for (std::size_t i = global_index(); i < BTC; i += global_stride()) {
    const HeadPosition at = head_position(i, T, NH, HS);
    dy[i] = dout[(at.b * T + at.t) * C + at.h * HS + at.d];
  }
}

// dqkv[B,T,3,NH,HS] += parts[3][B,NH,T,HS]
__global__ void merge_gradients_kernel(float* dqkv, const float* parts, int B, int T, int NH, int HS) {
  const std::size_t C = static_cast<std::size_t>(NH) * HS;
  const std::size_t BTC = static_cast<std::size_t>(B) * T * C;
  for (std::size_t i = global_index(); i < 3 * BTC; i += global_stride()) {
    const std::size_t c3 = i % (3 * C), bt = i / (3 * C);
    const std::size_t t = bt % T, b = bt / T;
    const std::size_t part = c3 / C, c = c3 % C;
    const std::size_t h = c / HS, d = c % HS;
    dqkv[i] += parts[part * BTC + ((b * NH + h) * T + t) * HS + d];
  }
}

// One warp per row of att[rows, T] (row r is query t = r % T): softmax over
// keys 0..t in fp32, zeros after t. The scale is already applied.
__global__ void causal_softmax_kernel(float* att, int rows, int T) {
  const int lane = threadIdx.x % kWarpSize;
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (r >= rows) return;
  const int t = r % T;
  float* row = att + static_cast<std::size_t>(r) * T;
  float maximum = -INFINITY;
  for (int j = lane; j <= t; j += kWarpSize) maximum = fmaxf(maximum, row[j]);
  maximum = warp_max(maximum);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += kWarpSize) sum += expf(row[j] - maximum);
  const float inverse = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += kWarpSize) row[j] = j <= t ? expf(row[j] - maximum) * inverse : 0.0f;
}

// In place on datt: datt = scale * att * (datt - sum_j att*datt), 0 after t.
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int rows, int T, float scale) {
  const int lane = threadIdx.x % kWarpSize;
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (r >= rows) return;
  const int t = r % T;
  const std::size_t offset = static_cast<std::size_t>(r) * T;
  const float* p = att + offset;
  float* d = datt + offset;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += kWarpSize) dot += p[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += kWarpSize) d[j] = j <= t ? scale * p[j] * (d[j] - dot) : 0.0f;
}

}  // namespace

void attention_forward(const Context& ctx, float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return;
  const int HS = C / NH;
  const std::size_t BTC = static_cast<std::size_t>(B) * T * C;
  const std::size_t TT = static_cast<std::size_t>(T) * T;
  const long long head_stride = static_cast<long long>(T) * HS;
  const int batch = B * NH;
  const int rows = batch * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  Workspace& w = *ctx.work;

  float* parts = w.attention.get<float>(4 * BTC, ctx.stream);  // q, k, v, y
  float* y = parts + 3 * BTC;
  split_heads_kernel<<<elementwise_blocks(3 * BTC), kElementwiseThreads, 0, ctx.stream>>>(parts, qkv, B, T, NH, HS);
  GT_CUDA_CHECK_LAUNCH();

  const void* qkv_operand = gemm_operand(ctx, parts, 3 * BTC, w.gemm_operand[0]);
  const std::size_t element = ctx.precision == MatmulPrecision::bf16 ? 2 : 4;
  const char* base = static_cast<const char*>(qkv_operand);
  const void* q = base;
  const void* k = base + BTC * element;
  const void* v = base + 2 * BTC * element;

  gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, scale, k, HS, head_stride, q, HS, head_stride, 0.0f, att, T,
       static_cast<long long>(TT), batch);
  causal_softmax_kernel<<<ceil_div(rows, kRowsPerBlock), kRowThreads, 0, ctx.stream>>>(att, rows, T);
  GT_CUDA_CHECK_LAUNCH();
  const void* att_operand = gemm_operand(ctx, att, batch * TT, w.gemm_operand[1]);
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, 1.0f, v, HS, head_stride, att_operand, T,
       static_cast<long long>(TT), 0.0f, y, HS, head_stride, batch);
  merge_heads_kernel<<<elementwise_blocks(BTC), kElementwiseThreads, 0, ctx.stream>>>(out, y, B, T, NH, HS);
  GT_CUDA_CHECK_LAUNCH();
}

void attention_backward(const Context& ctx, float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return;
  const int HS = C / NH;
  const std::size_t BTC = static_cast<std::size_t>(B) * T * C;
  const std::size_t TT = static_cast<std::size_t>(T) * T;
  const long long head_stride = static_cast<long long>(T) * HS;
  const long long att_stride = static_cast<long long>(TT);
  const int batch = B * NH;
  const int rows = batch * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  Workspace& w = *ctx.work;
  const std::size_t element = ctx.precision == MatmulPrecision::bf16 ? 2 : 4;

  // parts: q, k, v | dy | dq, dk, dv
  float* parts = w.attention.get<float>(7 * BTC, ctx.stream);
  float* dy = parts + 3 * BTC;
  float* dparts = parts + 4 * BTC;
  float* dq = dparts;
  float* dk = dparts + BTC;
  float* dv = dparts + 2 * BTC;
  split_heads_kernel<<<elementwise_blocks(3 * BTC), kElementwiseThreads, 0, ctx.stream>>>(parts, qkv, B, T, NH, HS);
  GT_CUDA_CHECK_LAUNCH();
  split_gradient_kernel<<<elementwise_blocks(BTC), kElementwiseThreads, 0, ctx.stream>>>(dy, dout, B, T, NH, HS);
  GT_CUDA_CHECK_LAUNCH();

  const char* qkv_base = static_cast<const char*>(gemm_operand(ctx, parts, 3 * BTC, w.gemm_operand[0]));
  const void* q = qkv_base;
  const void* k = qkv_base + BTC * element;
  const void* v = qkv_base + 2 * BTC * element;
  const void* dy_operand = gemm_operand(ctx, dy, BTC, w.gemm_operand[2]);
  const void* att_operand = gemm_operand(ctx, att, batch * TT, w.gemm_operand[1]);

  gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, 1.0f, v, HS, head_stride, dy_operand, HS, head_stride, 0.0f, datt,
       T, att_stride, batch);
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, 1.0f, dy_operand, HS, head_stride, att_operand, T, att_stride, 0.0f,
       dv, HS, head_stride, batch);
  causal_softmax_backward_kernel<<<ceil_div(rows, kRowsPerBlock), kRowThreads, 0, ctx.stream>>>(datt, att, rows, T,
                                                                                               scale);
  GT_CUDA_CHECK_LAUNCH();
  // The bf16 copy of att is no longer needed: its scratch takes the one of datt.
  const void* datt_operand = gemm_operand(ctx, datt, batch * TT, w.gemm_operand[1]);
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, 1.0f, k, HS, head_stride, datt_operand, T, att_stride, 0.0f, dq, HS,
       head_stride, batch);
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, 1.0f, q, HS, head_stride, datt_operand, T, att_stride, 0.0f, dk, HS,
       head_stride, batch);
  merge_gradients_kernel<<<elementwise_blocks(3 * BTC), kElementwiseThreads, 0, ctx.stream>>>(dqkv, dparts, B, T,
                                                                                              NH, HS);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
