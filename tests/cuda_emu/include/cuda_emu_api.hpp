// The CUDA runtime API as the emulation provides it: the types and the host
// functions the backend calls (runtime/memory_and_streams.cpp).
#pragma once

#include <cstddef>

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
inline constexpr int warpSize = 32;

// The error codes, with CUDA's values, as one list: the enum and
// cudaGetErrorName (runtime/memory_and_streams.cpp) are both made from it.
#define CUDA_EMU_ERRORS(X)                                                                                            \
  X(cudaSuccess, 0) X(cudaErrorInvalidValue, 1) X(cudaErrorMemoryAllocation, 2) X(cudaErrorInvalidConfiguration, 9) \
  X(cudaErrorInvalidDevicePointer, 17) X(cudaErrorInvalidMemcpyDirection, 21) X(cudaErrorNoDevice, 100)             \
  X(cudaErrorInvalidDevice, 101) X(cudaErrorLaunchFailure, 719)
enum cudaError_t {
#define CUDA_EMU_ENUMERATOR(name, value) name = value,
  CUDA_EMU_ERRORS(CUDA_EMU_ENUMERATOR)
#undef CUDA_EMU_ENUMERATOR
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
struct CUstream_st;
struct CUevent_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;
struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int major, minor, multiProcessorCount, warpSize, maxThreadsPerBlock;
  std::size_t sharedMemPerBlock;
};

const char* cudaGetErrorName(cudaError_t);
const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int*);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreate(cudaStream_t*);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t*, unsigned);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaMalloc(void**, std::size_t);
cudaError_t cudaFree(void*);
cudaError_t cudaMallocHost(void**, std::size_t);
cudaError_t cudaFreeHost(void*);
cudaError_t cudaMemcpy(void*, const void*, std::size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void*, const void*, std::size_t, cudaMemcpyKind, cudaStream_t = nullptr);
cudaError_t cudaMemset(void*, int, std::size_t);
cudaError_t cudaMemsetAsync(void*, int, std::size_t, cudaStream_t = nullptr);
template <class T>
cudaError_t cudaMalloc(T** pointer, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}
template <class T>
cudaError_t cudaMallocHost(T** pointer, std::size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(pointer), bytes);
}
