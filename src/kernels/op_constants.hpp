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

}  // namespace geotrain::kernels
