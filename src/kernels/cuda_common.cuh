// Device helpers shared by the CUDA kernels: launch sizes and fixed-order
// (hence deterministic) warp and block reductions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace geotrain::kernels::cuda {

// `#pragma unroll` under nvcc; the host compiler of the CUDA emulation
// (tests/cuda_emu) would warn about an unknown pragma.
#if defined(__CUDACC__)
#define GT_UNROLL _Pragma("unroll")
#else
#define GT_UNROLL
#endif

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
// Threads per block of the element-wise kernels (grid-stride loops).
constexpr int kElementwiseThreads = 256;
// Cap on the grid of grid-stride kernels: enough blocks to fill any current
// GPU many times over, and a grid size that depends only on n.
constexpr std::size_t kMaxElementwiseBlocks = 65536;

// Largest gridDim.y (and gridDim.z) of a launch; gridDim.x goes to 2^31 - 1.
constexpr int kMaxGridY = 65535;

// Blocks for a grid-stride loop over n items; n > 0.
inline unsigned elementwise_blocks(std::size_t n, int threads = kElementwiseThreads) {
  const std::size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::min(blocks, kMaxElementwiseBlocks));
}

inline unsigned ceil_div(std::size_t n, std::size_t d) { return static_cast<unsigned>((n + d - 1) / d); }

// Index and stride of a grid-stride loop, 64-bit.
__device__ __forceinline__ std::size_t global_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t global_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

// Butterfly reductions: every lane ends with the same value, and the order of
// the additions is fixed, so results are bitwise reproducible.
__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullMask, value, offset);
  return value;
}
__device__ __forceinline__ float warp_max(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (at most 1024);
// `shared` holds 32 floats. Every thread receives the result.
__device__ __forceinline__ float block_sum(float value, float* shared) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  value = warp_sum(value);
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(value);
}
__device__ __forceinline__ float block_max(float value, float* shared) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(value);
}

}  // namespace geotrain::kernels::cuda
