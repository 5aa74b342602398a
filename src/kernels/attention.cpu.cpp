// Causal multi-head self-attention, CPU twin of attention.cu: the same tiled
// algorithm with an online softmax (FlashAttention-2), the same tiles, the
// same rounding of operands to bf16 where the matmul precision is bf16.
// qkv[B,T,3C] holds q | k | v per token, each C = NH heads x hs channels;
// scale = 1/sqrt(hs); s[t,t2] = scale q_t . k_t2 for t2 <= t.
//   forward, per query tile (kAttentionTile rows), over key tiles 0..itself:
//     m' = max(m, max_t2 s);  l = l e^(m - m') + sum_t2 e^(s - m')
//     o = o e^(m - m') + sum_t2 e^(s - m') v_t2;   finally out = o / l and
//     lse = m + log l, the only per-row state kept for the backward.
//   backward (kAttentionBackwardTile), probabilities recomputed per tile:
//     D_t = dout_t . out_t;  p = e^(s - lse_t);  dv_t2 += p dout_t
//     dp = dout_t . v_t2;    ds = scale p (dp - D_t)
//     dq_t += ds k_t2  (per query tile, looping over key tiles)
//     dk_t2 += ds q_t  (per key tile, looping over query tiles)
//   so every output row is owned by one task and summed in a fixed order:
//   the result does not depend on the thread count, and no T x T matrix
//   exists anywhere.
// bf16 precision: q, k, v, dout and the GEMM-like operands p and ds are
// rounded to bf16 before their products, as attention.cu does on the GPU
// (fp32 sums). The softmax statistics, D and lse stay fp32.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

#include "cpu_math.hpp"
#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"
#include "op_constants.hpp"

namespace geotrain::kernels::cpu {
namespace {

constexpr int kMaxHs = kAttentionMaxHeadSize;

// Pointers into one (batch, head) slice of the packed qkv tensor.
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
// element). The order is fixed at compile time: results stay the same from
// run to run and for any thread count.
float dot(const float* x, const float* y, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

float operand(float x, bool bf16) { return bf16 ? round_to_bf16(x) : x; }

void load_row(float* to, const float* from, int hs, bool bf16) {
  for (int i = 0; i < hs; ++i) to[i] = operand(from[i], bf16);
}

void check_head_size(int C, int NH) {
  if (NH <= 0 || C % NH != 0 || C / NH > kMaxHs) {
    throw std::invalid_argument("attention: head size C/NH must divide C and be at most " +
                                std::to_string(kMaxHs) + " (C = " + std::to_string(C) +
                                ", NH = " + std::to_string(NH) + ")");
  }
}

// One query tile of one (batch, head): rows r0 .. r0 + rows - 1.
// `omp simd` on the row updates: o, v and the tiles never overlap, but the
// compiler cannot prove it.
GEOTRAIN_SIMD_CLONES void forward_tile(float* out_head, float* lse_head, const HeadView& head, int tile, int T,
                                       float scale, bool bf16) {
  constexpr int kT = kAttentionTile;
  const int hs = head.hs;
  const int r0 = tile * kT, rows = std::min(kT, T - r0);
  alignas(64) float q[kT][kMaxHs], k[kT][kMaxHs], v[kT][kMaxHs], o[kT][kMaxHs];
  float m[kT], l[kT], s[kT];
  for (int r = 0; r < rows; ++r) {
    load_row(q[r], head.q(r0 + r), hs, bf16);
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0.0f;
    for (int i = 0; i < hs; ++i) o[r][i] = 0.0f;
  }
  for (int key_tile = 0; key_tile <= tile; ++key_tile) {
    const int c0 = key_tile * kT, cols = std::min(kT, T - c0);
    for (int c = 0; c < cols; ++c) {
      load_row(k[c], head.k(c0 + c), hs, bf16);
      load_row(v[c], head.v(c0 + c), hs, bf16);
    }
    for (int r = 0; r < rows; ++r) {
      const int keys = std::min(cols, r0 + r - c0 + 1);  // >= 1: key c0 <= r0 <= t
      float tile_max = -std::numeric_limits<float>::infinity();
      for (int c = 0; c < keys; ++c) {
        s[c] = dot(q[r], k[c], hs) * scale;
        tile_max = std::max(tile_max, s[c]);
      }
      const float m_new = std::max(m[r], tile_max);
      const float alpha = std::exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int c = 0; c < keys; ++c) {
        s[c] = exp_vectorisable(s[c] - m_new);
        sum += s[c];
      }
      l[r] = l[r] * alpha + sum;
      m[r] = m_new;
      float* o_r = o[r];
#pragma omp simd
      for (int i = 0; i < hs; ++i) o_r[i] *= alpha;
      for (int c = 0; c < keys; ++c) {
        const float p = operand(s[c], bf16);
        const float* v_c = v[c];
#pragma omp simd
        for (int i = 0; i < hs; ++i) o_r[i] += p * v_c[i];
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    const float inverse = 1.0f / l[r];  // l >= 1: the row's maximum contributes e^0
    float* out_t = out_head + static_cast<std::ptrdiff_t>(r0 + r) * head.C;
    for (int i = 0; i < hs; ++i) out_t[i] = o[r][i] * inverse;
    lse_head[r0 + r] = m[r] + std::log(l[r]);
  }
}

// The tiles of the backward: q, dout (query rows), k, v (key rows) as
// operands, lse and D per query row.
struct BackwardTiles {
  static constexpr int kT = kAttentionBackwardTile;
  alignas(64) float q[kT][kMaxHs], dout[kT][kMaxHs], k[kT][kMaxHs], v[kT][kMaxHs];
  float lse[kT], D[kT];
};

// One (batch, head) slice of the backward, with the settings of the call.
struct BackwardSlice {
  float* dqkv;        // the head's q columns of token 0 in dqkv (k at +C, v at +2C)
  const float* dout;  // the head's columns of dout, token 0
  HeadView head;
  const float* lse;  // the slice's T values of lse and of D
  const float* D;
  int T;
  float scale;
  bool bf16;
};

// The rows of backward tile `tile`: first .. first + count - 1.
struct TileRows {
  int first, count;
};
TileRows tile_rows(int tile, int T) {
  const int first = tile * BackwardTiles::kT;
  return {first, std::min(BackwardTiles::kT, T - first)};
}

void load_query_tile(BackwardTiles& w, const BackwardSlice& s, int r0, int rows) {
  const HeadView& head = s.head;
  for (int r = 0; r < rows; ++r) {
    load_row(w.q[r], head.q(r0 + r), head.hs, s.bf16);
    load_row(w.dout[r], s.dout + static_cast<std::ptrdiff_t>(r0 + r) * head.C, head.hs, s.bf16);
    w.lse[r] = s.lse[r0 + r];
    w.D[r] = s.D[r0 + r];
  }
}

void load_key_tile(BackwardTiles& w, const HeadView& head, int c0, int cols, bool bf16) {
  for (int c = 0; c < cols; ++c) {
    load_row(w.k[c], head.k(c0 + c), head.hs, bf16);
    load_row(w.v[c], head.v(c0 + c), head.hs, bf16);
  }
}

// p and ds of query row r and key row c of the loaded tiles (ds includes the
// scale, as the gradient of the scaled score).
struct Recomputed {
  float p, ds;
};
inline Recomputed recompute(const BackwardTiles& w, int r, int c, int hs, float scale) {
  const float p = exp_vectorisable(dot(w.q[r], w.k[c], hs) * scale - w.lse[r]);
  const float dp = dot(w.dout[r], w.v[c], hs);
  return {p, scale * p * (dp - w.D[r])};
}

// dk, dv of one key tile, over the query tiles from its own to the last.
GEOTRAIN_SIMD_CLONES void backward_key_tile(const BackwardSlice s, int tile) {
  constexpr int kT = BackwardTiles::kT;
  const int hs = s.head.hs, C = s.head.C;
  const auto [c0, cols] = tile_rows(tile, s.T);
  BackwardTiles w;
  alignas(64) float dk[kT][kMaxHs] = {}, dv[kT][kMaxHs] = {};
  load_key_tile(w, s.head, c0, cols, s.bf16);
  const int query_tiles = (s.T + kT - 1) / kT;
  for (int query_tile = tile; query_tile < query_tiles; ++query_tile) {
    const auto [r0, rows] = tile_rows(query_tile, s.T);
    load_query_tile(w, s, r0, rows);
    for (int c = 0; c < cols; ++c) {
      float* dk_c = dk[c];
      float* dv_c = dv[c];
      for (int r = std::max(0, c0 + c - r0); r < rows; ++r) {  // query r0 + r >= key c0 + c
        const Recomputed g = recompute(w, r, c, hs, s.scale);
        const float p = operand(g.p, s.bf16), ds = operand(g.ds, s.bf16);
        const float* dout_r = w.dout[r];
        const float* q_r = w.q[r];
#pragma omp simd
        for (int i = 0; i < hs; ++i) {
          dv_c[i] += p * dout_r[i];
          dk_c[i] += ds * q_r[i];
        }
      }
    }
  }
  for (int c = 0; c < cols; ++c) {
    float* row = s.dqkv + static_cast<std::ptrdiff_t>(c0 + c) * 3 * C;
    for (int i = 0; i < hs; ++i) {
      row[C + i] += dk[c][i];
      row[2 * C + i] += dv[c][i];
    }
  }
}

// dq of one query tile, over the key tiles from the first to its own.
GEOTRAIN_SIMD_CLONES void backward_query_tile(const BackwardSlice s, int tile) {
  constexpr int kT = BackwardTiles::kT;
  const int hs = s.head.hs, C = s.head.C;
  const auto [r0, rows] = tile_rows(tile, s.T);
  BackwardTiles w;
  alignas(64) float dq[kT][kMaxHs] = {};
  load_query_tile(w, s, r0, rows);
  for (int key_tile = 0; key_tile <= tile; ++key_tile) {
    const auto [c0, cols] = tile_rows(key_tile, s.T);
    load_key_tile(w, s.head, c0, cols, s.bf16);
    for (int r = 0; r < rows; ++r) {
      float* dq_r = dq[r];
      const int keys = std::min(cols, r0 + r - c0 + 1);
      for (int c = 0; c < keys; ++c) {
        const float ds = operand(recompute(w, r, c, hs, s.scale).ds, s.bf16);
        const float* k_c = w.k[c];
#pragma omp simd
        for (int i = 0; i < hs; ++i) dq_r[i] += ds * k_c[i];
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* row = s.dqkv + static_cast<std::ptrdiff_t>(r0 + r) * 3 * C;
    for (int i = 0; i < hs; ++i) row[i] += dq[r][i];
  }
}

// Where one (batch, head, tile) task reads and writes.
struct Task {
  int b, h, tile;
};
Task task_of(std::ptrdiff_t index, int NH, int tiles) {
  const int tile = static_cast<int>(index % tiles);
  const std::ptrdiff_t slice = index / tiles;
  return {static_cast<int>(slice / NH), static_cast<int>(slice % NH), tile};
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       MatmulPrecision precision) {
  if (B == 0 || T == 0 || C == 0) return;
  check_head_size(C, NH);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const bool bf16 = precision == MatmulPrecision::bf16;
  const int tiles = (T + kAttentionTile - 1) / kAttentionTile;
  const std::ptrdiff_t tasks = static_cast<std::ptrdiff_t>(B) * NH * tiles;
  const std::size_t work = static_cast<std::size_t>(B) * NH * T * T * hs;
  // Tiles further down the sequence attend to more keys: dynamic scheduling balances them.
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(work))
  for (std::ptrdiff_t index = 0; index < tasks; ++index) {
    const Task task = task_of(index, NH, tiles);
    const std::ptrdiff_t token0 = static_cast<std::ptrdiff_t>(task.b) * T;
    const HeadView head{qkv + token0 * 3 * C + task.h * hs, C, hs};
    forward_tile(out + token0 * C + task.h * hs, lse + (static_cast<std::ptrdiff_t>(task.b) * NH + task.h) * T,
                 head, task.tile, T, scale, bf16);
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, MatmulPrecision precision) {
  if (B == 0 || T == 0 || C == 0) return;
  check_head_size(C, NH);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const bool bf16 = precision == MatmulPrecision::bf16;
  const std::size_t work = static_cast<std::size_t>(B) * NH * T * T * hs;

  // D[b,h,t] = dout_t . out_t (fp32): the row sums of p * dp without p.
  float* D = scratch;
  const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(B) * NH * T;
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(rows) * hs))
  for (std::ptrdiff_t row = 0; row < rows; ++row) {
    const int t = static_cast<int>(row % T);
    const int h = static_cast<int>((row / T) % NH);
    const std::ptrdiff_t b = row / (static_cast<std::ptrdiff_t>(T) * NH);
    const std::ptrdiff_t at = (b * T + t) * C + h * hs;
    D[row] = dot(dout + at, out + at, hs);
  }

  const int tiles = (T + kAttentionBackwardTile - 1) / kAttentionBackwardTile;
  const std::ptrdiff_t tasks = static_cast<std::ptrdiff_t>(B) * NH * tiles;
  auto run = [&](auto&& pass) {
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(work))
    for (std::ptrdiff_t index = 0; index < tasks; ++index) {
      const Task task = task_of(index, NH, tiles);
      const std::ptrdiff_t token0 = static_cast<std::ptrdiff_t>(task.b) * T;
      const std::ptrdiff_t slice = static_cast<std::ptrdiff_t>(task.b) * NH + task.h;
      const HeadView head{qkv + token0 * 3 * C + task.h * hs, C, hs};
      pass(BackwardSlice{dqkv + token0 * 3 * C + task.h * hs, dout + token0 * C + task.h * hs, head, lse + slice * T,
                         D + slice * T, T, scale, bf16},
           task.tile);
    }
  };
  // Two passes, as the two CUDA kernels: dk and dv per key tile, dq per query tile.
  run(backward_key_tile);
  run(backward_query_tile);
}

}  // namespace geotrain::kernels::cpu
