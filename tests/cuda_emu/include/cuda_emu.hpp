// The CUDA emulation: a .cu file, after chevrons.sed, compiles as C++ with
// this header forced in (-include) and this folder first on the include path,
// and its kernels run on the CPU. Blocks run one after another (so __shared__
// is a function-local static); the threads of a block run as fibers on one OS
// thread, __syncthreads is a block barrier and a warp shuffle a warp barrier.
// What it cannot tell (speed, races between blocks, real cuBLAS numerics) is
// in tests/cuda_emu/README.md.
#pragma once

#include <cmath>

#include "cuda_emu_api.hpp"
#include "cuda_emu_engine.hpp"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
// A section of its own, so that the runtime can fill every __shared__ array
// with NaN before each block (a kernel that reads shared memory it never wrote fails).
#define __shared__ static __attribute__((section("cuda_emu_shared")))

#define threadIdx (static_cast<const uint3&>(::cuda_emu::current_lane->thread_idx))
#define blockIdx (static_cast<const uint3&>(::cuda_emu::grid_state.block_idx))
#define blockDim (static_cast<const dim3&>(::cuda_emu::grid_state.block))
#define gridDim (static_cast<const dim3&>(::cuda_emu::grid_state.grid))

inline void __syncthreads() { cuda_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  unsigned present;
  cuda_emu::warp_exchange(0, mask, &present, "__syncwarp");
}

// Shuffles that reach outside their segment of `width` lanes return the
// lane's own value, as the hardware does.
template <class T>
T __shfl_sync(unsigned mask, T value, int source, int width = 32) {
  const unsigned lane = cuda_emu::current_lane->lane;
  const unsigned base = lane / width * width;
  return cuda_emu::shuffle_from(value, mask, base + (static_cast<unsigned>(source) % width), "__shfl_sync");
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  const unsigned lane = cuda_emu::current_lane->lane;
  unsigned source = lane ^ static_cast<unsigned>(lane_mask);
  if (source / width != lane / width) source = lane;
  return cuda_emu::shuffle_from(value, mask, source, "__shfl_xor_sync");
}
template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  const unsigned lane = cuda_emu::current_lane->lane;
  unsigned source = lane + delta;
  if (source / width != lane / width) source = lane;
  return cuda_emu::shuffle_from(value, mask, source, "__shfl_down_sync");
}
template <class T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  const unsigned lane = cuda_emu::current_lane->lane;
  const unsigned source = (lane % width) >= delta ? lane - delta : lane;
  return cuda_emu::shuffle_from(value, mask, source, "__shfl_up_sync");
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  unsigned present;
  const std::uint64_t* values = cuda_emu::warp_exchange(predicate != 0, mask, &present, "__ballot_sync");
  unsigned out = 0;
  for (unsigned i = 0; i < 32; ++i) out |= ((present >> i) & 1u) && values[i] ? 1u << i : 0u;
  return out & mask;
}

// CUDA's global min/max overloads (device code calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
// The fast intrinsics as their exact counterparts: last-bit differences of
// GPU math are among what only a real GPU shows.
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __fdividef(float a, float b) { return a / b; }

template <class T>
T atomicAdd(T* address, T value) {
  return cuda_emu::atomic_update<T>(address, [](T x, T y) { return x + y; }, value);
}
template <class T>
T atomicMin(T* address, T value) {
  return cuda_emu::atomic_update<T>(address, [](T x, T y) { return y < x ? y : x; }, value);
}
template <class T>
T atomicMax(T* address, T value) {
  return cuda_emu::atomic_update<T>(address, [](T x, T y) { return y > x ? y : x; }, value);
}
template <class T>
T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}
template <class T>
T atomicCAS(T* address, T expected, T desired) {
  std::atomic_ref<T>(*address).compare_exchange_strong(expected, desired);
  return expected;
}
