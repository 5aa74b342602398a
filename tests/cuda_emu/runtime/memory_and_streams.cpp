// The CUDA runtime API: device memory (a registry, so that kernels, cuBLAS
// and CUB can check that a pointer lies inside one allocation; fresh memory
// filled with NaN), streams (work runs at once, or is queued until a
// synchronisation point under CUDA_EMU_DEFERRED=1), events, errors.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "cuda_emu_engine.hpp"
#include "settings.hpp"

namespace cuda_emu {
namespace {
cudaError_t last_error = cudaSuccess;
std::map<std::uintptr_t, std::size_t> device_allocations;
std::set<const void*> pinned;
std::map<cudaStream_t, std::deque<std::function<void()>>> queues;

void drain(cudaStream_t stream) {
  auto& q = queues[stream];
  while (!q.empty()) {
    auto work = std::move(q.front());
    q.pop_front();
    work();
  }
}
void drain_all() {
  for (auto& [stream, q] : queues) drain(stream);
}
// Base pointers only: the backend passes what cudaMallocHost returned.
bool is_pinned(const void* p) { return pinned.count(p) != 0; }
}  // namespace

bool is_device_range(const void* p, std::size_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  auto it = device_allocations.upper_bound(address);
  if (it == device_allocations.begin()) return false;
  --it;
  return address >= it->first && address + bytes <= it->first + it->second;
}

void enqueue(cudaStream_t stream, std::function<void()> work) {
  if (settings().deferred) {
    queues[stream].push_back(std::move(work));
  } else {
    work();
  }
}

void set_launch_error(cudaError_t error) { last_error = error; }

}  // namespace cuda_emu

using namespace cuda_emu;

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define CUDA_EMU_NAME_CASE(name, value) \
  case name: return #name;
    CUDA_EMU_ERRORS(CUDA_EMU_NAME_CASE)
#undef CUDA_EMU_NAME_CASE
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    default: return cudaGetErrorName(e);
  }
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return last_error; }
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "cuda-emu (CUDA kernels emulated on the CPU)");
  p->totalGlobalMem = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 1;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = 48 * 1024;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  drain_all();
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(new char[1]);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  drain(s);
  queues.erase(s);
  delete[] reinterpret_cast<char*>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  drain(s);
  return cudaSuccess;
}
struct CUevent_st {
  cudaStream_t stream = nullptr;
};
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  e->stream = s;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  drain(e->stream);  // all the stream's work, not only up to the record: later than a GPU, never earlier
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  void* memory = nullptr;
  if (posix_memalign(&memory, 256, bytes == 0 ? 1 : bytes) != 0) return cudaErrorMemoryAllocation;
  if (settings().poison) std::memset(memory, 0xff, bytes);  // read before written: NaN (floats), -1 (ints)
  device_allocations[reinterpret_cast<std::uintptr_t>(memory)] = bytes;
  *p = memory;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  drain_all();  // cudaFree synchronises the device
  auto it = device_allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == device_allocations.end()) return cudaErrorInvalidDevicePointer;
  device_allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  *p = std::malloc(bytes == 0 ? 1 : bytes);
  pinned.insert(*p);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* p) {
  drain_all();
  pinned.erase(p);
  std::free(p);
  return cudaSuccess;
}

namespace {
cudaError_t check_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  const bool dst_device = is_device_range(dst, bytes), src_device = is_device_range(src, bytes);
  const bool dst_any = is_device_range(dst, 0), src_any = is_device_range(src, 0);
  switch (kind) {
    case cudaMemcpyHostToDevice: return dst_device && !src_any ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return src_device && !dst_any ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return dst_device && src_device ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToHost: return !dst_any && !src_any ? cudaSuccess : cudaErrorInvalidValue;
    default:
      return (dst_any && !dst_device) || (src_any && !src_device) ? cudaErrorInvalidValue : cudaSuccess;
  }
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t e = check_copy(dst, src, bytes, kind); e != cudaSuccess) return e;
  drain_all();
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t e = check_copy(dst, src, bytes, kind); e != cudaSuccess) return e;
  const bool host_src = !is_device_range(src, 0), host_dst = !is_device_range(dst, 0);
  if (host_dst && !is_pinned(dst)) {  // to pageable memory: returns once the copy is done
    drain(s);
    std::memcpy(dst, src, bytes);
  } else if (host_src && !is_pinned(src)) {  // from pageable memory: staged at the call
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                    static_cast<const char*>(src) + bytes);
    enqueue(s, [=] { std::memcpy(dst, copy->data(), bytes); });
  } else {
    enqueue(s, [=] { std::memcpy(dst, src, bytes); });
  }
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, std::size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(p, bytes)) return cudaErrorInvalidValue;
  drain_all();
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(p, bytes)) return cudaErrorInvalidValue;
  enqueue(s, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

