// One checked-call macro family for every CUDA runtime and cuBLAS call of the
// CUDA backend. A failed call throws geotrain::RunError with the call, the
// source file:line, the library's error name and string, and the host name;
// the runtime turns the RunError into a one-line report and an MPI_Abort.
//
//   GEOTRAIN_CUDA_CHECK(cudaMalloc(&p, bytes));      // cudaError_t or cublasStatus_t
//   kernel<<<grid, block, 0, stream>>>(...);
//   GEOTRAIN_CUDA_CHECK_LAUNCH();                    // launch errors (bad configuration)
//   GEOTRAIN_CUDA_WARN(cudaFree(p));                 // destructors: report to stderr, never throw
//
// Errors of kernels that fault while running are asynchronous: they surface
// at the next checked call that synchronises (download, synchronize, ...).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "geotrain/common/errors.hpp"

namespace geotrain::kernels::cuda {

inline std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

// The file name from "src/" on, so that messages do not depend on where the
// tree was built.
inline const char* short_file(const char* file) {
  const std::string path(file);
  const std::size_t at = path.rfind("src/");
  return at == std::string::npos ? file : file + at;
}

inline std::string call_error_message(const char* library, const char* expression, const char* error_name,
                                      const char* error_text, const char* file, int line) {
  return std::string(library) + " error at " + short_file(file) + ":" + std::to_string(line) + " on host " +
         host_name() + ": " + expression + " failed: " + error_name + " (" + error_text + ")";
}

inline void check_call(cudaError_t status, const char* expression, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw RunError(call_error_message("CUDA", expression, cudaGetErrorName(status), cudaGetErrorString(status),
                                    file, line));
}

inline void check_call(cublasStatus_t status, const char* expression, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw RunError(call_error_message("cuBLAS", expression, cublasGetStatusName(status),
                                    cublasGetStatusString(status), file, line));
}

// For destructors and other places that must not throw.
inline void warn_call(cudaError_t status, const char* expression, const char* file, int line) noexcept {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "geotrain: CUDA error at %s:%d: %s failed: %s (%s)\n", short_file(file), line, expression,
               cudaGetErrorName(status), cudaGetErrorString(status));
}

inline void warn_call(cublasStatus_t status, const char* expression, const char* file, int line) noexcept {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "geotrain: cuBLAS error at %s:%d: %s failed: %s (%s)\n", short_file(file), line, expression,
               cublasGetStatusName(status), cublasGetStatusString(status));
}

}  // namespace geotrain::kernels::cuda

#define GEOTRAIN_CUDA_CHECK(call) ::geotrain::kernels::cuda::check_call((call), #call, __FILE__, __LINE__)
#define GEOTRAIN_CUDA_CHECK_LAUNCH() \
  ::geotrain::kernels::cuda::check_call(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
#define GEOTRAIN_CUDA_WARN(call) ::geotrain::kernels::cuda::warn_call((call), #call, __FILE__, __LINE__)
