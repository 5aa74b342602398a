// Causal multi-head self-attention, fused and tiled (FlashAttention-2 style),
// forward and backward. No T x T matrix exists in global memory: the forward
// keeps only lse[B,NH,T] (log-sum-exp of each query row's scaled scores) and
// the backward recomputes the probabilities tile by tile from it.
// qkv[B,T,3C] (per token: q | k | v, each NH heads x HS = C/NH), out[B,T,C],
// scale 1/sqrt(HS). The kernels read qkv, dout and write out, dqkv in their
// packed layouts (no permuted copies).
//
//   forward (one block per query tile of kAttentionTile rows and (b, h);
//   key tiles 0..its own, with an online softmax):
//     s = scale q k^T;  m' = max(m, rowmax s);  l = l e^(m-m') + rowsum e^(s-m')
//     o = o e^(m-m') + e^(s-m') v;  out = o / l;  lse = m + log l
//   backward (kAttentionBackwardTile):
//     D = rowsum(dout * out)                            (row_dot_kernel)
//     per key tile, over query tiles from its own on:   (backward_key_kernel)
//       p = e^(s - lse);  dv += p^T dout;  dp = dout v^T;  ds = scale p (dp - D)
//       dk += ds^T q
//     per query tile, over key tiles up to its own:     (backward_query_kernel)
//       the same p and ds;  dq += ds k
// Every output row belongs to one block and is summed in a fixed order (no
// atomics): bitwise reproducible. The dq pass recomputes p and ds rather than
// adding into dq from every key tile's block, which would need atomics.
//
// Precision: fp32 accumulation always. In bf16 mode the operands of the
// products - q, k, v, dout and the probabilities p and score gradients ds -
// are rounded to bf16 (round to nearest even) as matmul.cu rounds GEMM
// operands; the softmax statistics m, l, lse and D stay fp32.
// attention.cpu.cpp is the same algorithm with the same tiles.
//
// Not tuned: CUDA-core FMAs, no tensor cores (mma) yet, so it trades speed
// for memory against the former cuBLAS version; tests/gpu/run.sh measures it.
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "op_constants.hpp"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kMaxHs = kAttentionMaxHeadSize;
// Shared tiles hold rows of up to kMaxHs channels padded by one float, so the
// threads of a warp that read different rows at the same channel hit
// different banks (rows are hs + 1 apart).
constexpr int kTileRowFloats = kMaxHs + 1;

// Forward: kRowThreads threads per query row; thread g of a row owns the
// scores of keys g, g + 4, ... and the output channels g, g + 4, ...
constexpr int kTile = kAttentionTile;
constexpr int kRowThreads = 4;
constexpr int kForwardThreads = kTile * kRowThreads;

// Backward: kBackRowThreads threads per (key or query) row.
constexpr int kBack = kAttentionBackwardTile;
constexpr int kBackRowThreads = 8;
constexpr int kBackwardThreads = kBack * kBackRowThreads;

constexpr int kRowDotThreads = 256;
constexpr int kRowDotRows = kRowDotThreads / kWarpSize;

__device__ __forceinline__ float operand(float x, bool bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}

// tile[r][d] = operand(src[(first + r) * stride + d]) for rows < T, 0 past
// the end (so that products with them are exact zeros, never NaN).
__device__ void load_tile(float* tile, int rows, const float* src, std::size_t stride, int first, int T, int hs,
                          bool bf16) {
  const int ld = hs + 1;
  for (int i = threadIdx.x; i < rows * hs; i += blockDim.x) {
    const int r = i / hs, d = i % hs;
    const int t = first + r;
    tile[r * ld + d] = t < T ? operand(src[static_cast<std::size_t>(t) * stride + d], bf16) : 0.0f;
  }
}

__device__ __forceinline__ float dot(const float* x, const float* y, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

// Sums / maxima over the kRowThreads (or kBackRowThreads) adjacent lanes of
// a row, in a fixed butterfly order; every lane of the warp takes part.
template <int kLanes>
__device__ __forceinline__ float group_sum(float value) {
  for (int offset = 1; offset < kLanes; offset *= 2) value += __shfl_xor_sync(kFullMask, value, offset);
  return value;
}
template <int kLanes>
__device__ __forceinline__ float group_max(float value) {
  for (int offset = 1; offset < kLanes; offset *= 2) value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  return value;
}

// One (batch, head) slice of a launch over grid.x = B*NH: where its tokens'
// q (k at +C, v at +2C; rows `stride` apart) and dout columns start.
struct HeadSlice {
  int index, C;
  std::size_t stride, token0, column;  // column: the head's first channel, h * hs
  const float* qkv;   // the slice's q of token 0
  const float* dout;  // the slice's columns of dout, token 0 (null: not given)
};

__device__ inline HeadSlice head_slice(const float* qkv, const float* dout, int T, int NH, int hs) {
  HeadSlice s;
  s.index = blockIdx.x;
  const int b = s.index / NH, h = s.index % NH;
  s.C = NH * hs;
  s.stride = 3 * static_cast<std::size_t>(s.C);
  s.token0 = static_cast<std::size_t>(b) * T;
  s.column = static_cast<std::size_t>(h) * hs;
  s.qkv = qkv + s.token0 * s.stride + s.column;
  s.dout = dout == nullptr ? nullptr : dout + s.token0 * s.C + s.column;
  return s;
}

// f(j, d) for each channel d = g + kLanes j < hs that lane g of a row owns (j:
// the slot of d in the lane's register arrays). The loop unrolls and skips
// rather than breaks, so that those arrays stay in registers.
template <int kLanes, typename F>
__device__ __forceinline__ void for_lane_channels(int g, int hs, F&& f) {
  GT_UNROLL
  for (int j = 0; j < kMaxHs / kLanes; ++j) {
    const int d = g + kLanes * j;
    if (d >= hs) continue;
    f(j, d);
  }
}

// grid (B*NH, query tiles), block kForwardThreads.
__global__ void attention_forward_kernel(float* out, float* lse, const float* qkv, int T, int NH, int hs,
                                         float scale, bool bf16) {
  __shared__ float q_tile[kTile * kTileRowFloats];
  __shared__ float kv_tile[kTile * kTileRowFloats];  // k, then v of the same key tile
  __shared__ float p_tile[kTile * (kTile + 1)];
  const HeadSlice at = head_slice(qkv, nullptr, T, NH, hs);
  const int slice = at.index, tile = blockIdx.y, C = at.C, ld = hs + 1;
  const std::size_t stride = at.stride;
  const float* head = at.qkv;
  const int r = threadIdx.x / kRowThreads, g = threadIdx.x % kRowThreads;
  const int r0 = tile * kTile;
  // Rows past the end compute as the last row (finite values, whole warps
  // in the shuffles) and are not written.
  const int t = min(r0 + r, T - 1);

  load_tile(q_tile, kTile, head, stride, r0, T, hs, bf16);
  float m = -INFINITY, l = 0.0f;
  float o[kMaxHs / kRowThreads];
  GT_UNROLL
  for (int j = 0; j < kMaxHs / kRowThreads; ++j) o[j] = 0.0f;

  for (int key_tile = 0; key_tile <= tile; ++key_tile) {
    const int c0 = key_tile * kTile, cols = min(kTile, T - c0);
    __syncthreads();  // the previous tile's reads of kv_tile and p_tile are done
    load_tile(kv_tile, kTile, head + C, stride, c0, T, hs, bf16);
    __syncthreads();
    float s[kTile / kRowThreads];
    float tile_max = -INFINITY;
    GT_UNROLL
    for (int j = 0; j < kTile / kRowThreads; ++j) {
      const int c = g + kRowThreads * j;
      s[j] = -INFINITY;
      if (c0 + c <= t) {
        s[j] = dot(q_tile + r * ld, kv_tile + c * ld, hs) * scale;
        tile_max = fmaxf(tile_max, s[j]);
      }
    }
    // Key c0 <= r0 <= t is always in range: the maximum is finite.
    const float m_new = fmaxf(m, group_max<kRowThreads>(tile_max));
    const float alpha = expf(m - m_new);  // 0 on the first tile (m = -inf)
    float sum = 0.0f;
    GT_UNROLL
    for (int j = 0; j < kTile / kRowThreads; ++j) {
      const int c = g + kRowThreads * j;
      const float p = c0 + c <= t ? expf(s[j] - m_new) : 0.0f;
      sum += p;
      p_tile[r * (kTile + 1) + c] = operand(p, bf16);
    }
    l = l * alpha + group_sum<kRowThreads>(sum);
    m = m_new;
    __syncthreads();  // k no longer read; p written
    load_tile(kv_tile, kTile, head + 2 * C, stride, c0, T, hs, bf16);
    __syncthreads();
    for_lane_channels<kRowThreads>(g, hs, [&](int j, int d) {
      float acc = o[j] * alpha;
      for (int c = 0; c < cols; ++c) acc += p_tile[r * (kTile + 1) + c] * kv_tile[c * ld + d];
      o[j] = acc;
    });
  }
  if (r0 + r >= T) return;
  const float inverse = 1.0f / l;  // l >= 1: the row's maximum contributes e^0
  float* out_t = out + (at.token0 + t) * C + at.column;
  for_lane_channels<kRowThreads>(g, hs, [&](int j, int d) { out_t[d] = o[j] * inverse; });
  if (g == 0) lse[static_cast<std::size_t>(slice) * T + t] = m + logf(l);
}

// D[b,h,t] = dout_t . out_t over the head's channels; one warp per row.
__global__ void attention_row_dot_kernel(float* D, const float* dout, const float* out, int rows, int T, int NH,
                                         int hs) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowDotRows + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  const std::size_t at = (static_cast<std::size_t>(b) * T + t) * NH * hs + static_cast<std::size_t>(h) * hs;
  float sum = 0.0f;
  for (int d = lane; d < hs; d += kWarpSize) sum += dout[at + d] * out[at + d];
  sum = warp_sum(sum);
  if (lane == 0) D[row] = sum;
}

// The tiles both backward kernels work on.
struct BackwardShared {
  float q[kBack * kTileRowFloats], dout[kBack * kTileRowFloats];
  float k[kBack * kTileRowFloats], v[kBack * kTileRowFloats];
  float lse[kBack], D[kBack];
  float g[kBack * (kBack + 1)], p[kBack * (kBack + 1)];  // ds (and p) of the tile pair
};

// The query side of a backward tile pair: q and dout rows r0.., their lse and D.
__device__ void load_query_side(BackwardShared& w, const HeadSlice& at, const float* lse, const float* D, int r0, int T,
                                int hs, bool bf16) {
  load_tile(w.q, kBack, at.qkv, at.stride, r0, T, hs, bf16);
  load_tile(w.dout, kBack, at.dout, at.C, r0, T, hs, bf16);
  if (threadIdx.x < kBack) {
    const int t = r0 + threadIdx.x;
    const std::size_t row = static_cast<std::size_t>(at.index) * T + t;
    w.lse[threadIdx.x] = t < T ? lse[row] : 0.0f;
    w.D[threadIdx.x] = t < T ? D[row] : 0.0f;
  }
}

// The key side of a backward tile pair: k and v rows c0..
__device__ void load_key_side(BackwardShared& w, const HeadSlice& at, int c0, int T, int hs, bool bf16) {
  load_tile(w.k, kBack, at.qkv + at.C, at.stride, c0, T, hs, bf16);
  load_tile(w.v, kBack, at.qkv + 2 * at.C, at.stride, c0, T, hs, bf16);
}

// p and ds for query row r, key row c of the loaded tiles; 0 where masked.
__device__ __forceinline__ void recompute(const BackwardShared& w, int r, int c, bool allowed, int hs, float scale,
                                          float* p, float* ds) {
  *p = 0.0f;
  *ds = 0.0f;
  if (!allowed) return;
  const int ld = hs + 1;
  *p = expf(dot(w.q + r * ld, w.k + c * ld, hs) * scale - w.lse[r]);
  const float dp = dot(w.dout + r * ld, w.v + c * ld, hs);
  *ds = scale * *p * (dp - w.D[r]);
}

// grid (B*NH, key tiles), block kBackwardThreads: dk, dv of one key tile.
__global__ void attention_backward_key_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                              const float* D, int T, int NH, int hs, float scale, bool bf16) {
  __shared__ BackwardShared w;
  const HeadSlice at = head_slice(qkv, dout, T, NH, hs);
  const int ld = hs + 1;
  const int c = threadIdx.x / kBackRowThreads, g = threadIdx.x % kBackRowThreads;
  const int c0 = blockIdx.y * kBack, key = c0 + c;

  load_key_side(w, at, c0, T, hs, bf16);
  float dk[kMaxHs / kBackRowThreads], dv[kMaxHs / kBackRowThreads];
  GT_UNROLL
  for (int j = 0; j < kMaxHs / kBackRowThreads; ++j) dk[j] = dv[j] = 0.0f;
  const int tiles = (T + kBack - 1) / kBack;
  for (int query_tile = blockIdx.y; query_tile < tiles; ++query_tile) {
    const int r0 = query_tile * kBack, rows = min(kBack, T - r0);
    __syncthreads();  // the previous query tile's reads are done
    load_query_side(w, at, lse, D, r0, T, hs, bf16);
    __syncthreads();
    GT_UNROLL
    for (int j = 0; j < kBack / kBackRowThreads; ++j) {
      const int r = g + kBackRowThreads * j;
      float p, ds;
      recompute(w, r, c, key < T && r0 + r < T && r0 + r >= key, hs, scale, &p, &ds);
      w.p[c * (kBack + 1) + r] = operand(p, bf16);
      w.g[c * (kBack + 1) + r] = operand(ds, bf16);
    }
    __syncthreads();
    for_lane_channels<kBackRowThreads>(g, hs, [&](int j, int d) {
      float dk_acc = dk[j], dv_acc = dv[j];
      for (int r = 0; r < rows; ++r) {
        dv_acc += w.p[c * (kBack + 1) + r] * w.dout[r * ld + d];
        dk_acc += w.g[c * (kBack + 1) + r] * w.q[r * ld + d];
      }
      dk[j] = dk_acc;
      dv[j] = dv_acc;
    });
  }
  if (key >= T) return;
  float* row = dqkv + (at.token0 + key) * at.stride + at.column;
  for_lane_channels<kBackRowThreads>(g, hs, [&](int j, int d) {
    row[at.C + d] += dk[j];
    row[2 * at.C + d] += dv[j];
  });
}

// grid (B*NH, query tiles), block kBackwardThreads: dq of one query tile.
__global__ void attention_backward_query_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                                const float* D, int T, int NH, int hs, float scale, bool bf16) {
  __shared__ BackwardShared w;
  const HeadSlice at = head_slice(qkv, dout, T, NH, hs);
  const int tile = blockIdx.y, ld = hs + 1;
  const int r = threadIdx.x / kBackRowThreads, g = threadIdx.x % kBackRowThreads;
  const int r0 = tile * kBack, t = r0 + r;

  load_query_side(w, at, lse, D, r0, T, hs, bf16);
  float dq[kMaxHs / kBackRowThreads];
  GT_UNROLL
  for (int j = 0; j < kMaxHs / kBackRowThreads; ++j) dq[j] = 0.0f;
  for (int key_tile = 0; key_tile <= tile; ++key_tile) {
    const int c0 = key_tile * kBack, cols = min(kBack, T - c0);
    __syncthreads();  // the previous key tile's reads are done
    load_key_side(w, at, c0, T, hs, bf16);
    __syncthreads();
    GT_UNROLL
    for (int j = 0; j < kBack / kBackRowThreads; ++j) {
      const int c = g + kBackRowThreads * j;
      float p, ds;
      recompute(w, r, c, t < T && c0 + c <= t, hs, scale, &p, &ds);
      w.g[r * (kBack + 1) + c] = operand(ds, bf16);
    }
    __syncthreads();
    for_lane_channels<kBackRowThreads>(g, hs, [&](int j, int d) {
      float acc = dq[j];
      for (int c = 0; c < cols; ++c) acc += w.g[r * (kBack + 1) + c] * w.k[c * ld + d];
      dq[j] = acc;
    });
  }
  if (t >= T) return;
  float* row = dqkv + (at.token0 + t) * at.stride + at.column;
  for_lane_channels<kBackRowThreads>(g, hs, [&](int j, int d) { row[d] += dq[j]; });
}

void check_shape(int B, int C, int NH, int T, int tile) {
  if (NH <= 0 || C % NH != 0 || C / NH > kMaxHs) {
    throw std::invalid_argument("attention: head size C/NH must divide C and be at most " + std::to_string(kMaxHs) +
                                " (C = " + std::to_string(C) + ", NH = " + std::to_string(NH) + ")");
  }
  if (static_cast<long long>(T + tile - 1) / tile > kMaxGridY) {
    throw std::invalid_argument("attention: sequence too long for the grid (T = " + std::to_string(T) + ")");
  }
  (void)B;
}

}  // namespace

void attention_forward(const Context& ctx, float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return;
  check_shape(B, C, NH, T, kTile);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const bool bf16 = ctx.precision == MatmulPrecision::bf16;
  const dim3 grid(B * NH, ceil_div(T, kTile));
  attention_forward_kernel<<<grid, kForwardThreads, 0, ctx.stream>>>(out, lse, qkv, T, NH, hs, scale, bf16);
  GT_CUDA_CHECK_LAUNCH();
}

void attention_backward(const Context& ctx, float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* lse, int B, int T, int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return;
  check_shape(B, C, NH, T, kBack);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const bool bf16 = ctx.precision == MatmulPrecision::bf16;
  const int rows = B * NH * T;
  float* D = scratch;
  attention_row_dot_kernel<<<ceil_div(rows, kRowDotRows), kRowDotThreads, 0, ctx.stream>>>(D, dout, out, rows, T, NH, hs);
  GT_CUDA_CHECK_LAUNCH();
  const dim3 grid(B * NH, ceil_div(T, kBack));
  attention_backward_key_kernel<<<grid, kBackwardThreads, 0, ctx.stream>>>(dqkv, dout, qkv, lse, D, T, NH, hs, scale, bf16);
  GT_CUDA_CHECK_LAUNCH();
  attention_backward_query_kernel<<<grid, kBackwardThreads, 0, ctx.stream>>>(dqkv, dout, qkv, lse, D, T, NH, hs, scale, bf16);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
