// Internal: numerical constants shared by the CPU twins (*.cpu.cpp) and the
// CUDA kernels (*.cu), so that both implement the same formulas. Plain C++17,
// constexpr scalars only: usable from host and device code.
#pragma once

namespace geotrain::kernels {

// LayerNorm: rstd = 1 / sqrt(var + eps), var the biased variance (divide by C),
// as torch.nn.LayerNorm's default.
inline constexpr float kLayerNormEps = 1e-5f;

// GELU, tanh approximation as GPT-2:
// gelu(x) = 0.5 x (1 + tanh(kGeluScale (x + kGeluCubic x^3))),
// kGeluScale = sqrt(2 / pi).
inline constexpr float kGeluScale = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

// Fused attention (attention.cu, attention.cpu.cpp): query and key tiles of
// the forward and of the backward, and the largest head size the kernels hold
// (their shared-memory tiles and per-thread accumulators are sized for it;
// GPT-2 has 64, GPT-3 XL 128). The backward's tile is smaller because it
// keeps four operand tiles (q, k, v, dout) in shared memory at once, where
// the forward keeps two: both fit the 48 KiB of static shared memory at
// head size 128. The CPU twin uses the same tiles, so it visits the same
// blocks in the same order.
inline constexpr int kAttentionTile = 32;
inline constexpr int kAttentionBackwardTile = 16;
inline constexpr int kAttentionMaxHeadSize = 128;

}  // namespace geotrain::kernels
