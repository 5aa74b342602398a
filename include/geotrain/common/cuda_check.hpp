// CUDA runtime and cuBLAS in the checked-call family (common/check.hpp):
//
//   GT_CUDA_CHECK(cudaMalloc(&p, bytes));      // cudaError_t or cublasStatus_t
//   kernel<<<grid, block, 0, stream>>>(...);
//   GT_CUDA_CHECK_LAUNCH();                    // launch errors (bad configuration)
//   GT_CUDA_WARN(cudaFree(p));                 // destructors: the line on stderr, nothing else
//
// Errors of kernels that fault while running are asynchronous: they surface
// at the next checked call that synchronises (download, synchronize, ...).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "geotrain/common/check.hpp"

namespace geotrain {

inline std::string cuda_error_text(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
}

inline std::string cuda_error_text(cublasStatus_t status) {
  return std::string(cublasGetStatusName(status)) + " (" + cublasGetStatusString(status) + ")";
}

inline bool cuda_succeeded(cudaError_t status) { return status == cudaSuccess; }
inline bool cuda_succeeded(cublasStatus_t status) { return status == CUBLAS_STATUS_SUCCESS; }
inline const char* cuda_library(cudaError_t) { return "CUDA"; }
inline const char* cuda_library(cublasStatus_t) { return "cuBLAS"; }

template <typename Status>
void check_cuda(Status status, const char* call, const char* file, int line) {
  if (!cuda_succeeded(status)) call_failed({cuda_library(status), call, file, line}, cuda_error_text(status));
}

template <typename Status>
void warn_cuda(Status status, const char* call, const char* file, int line) noexcept {
  if (!cuda_succeeded(status)) warn_failed_call({cuda_library(status), call, file, line}, cuda_error_text(status));
}

}  // namespace geotrain

#define GT_CUDA_CHECK(call) ::geotrain::check_cuda((call), #call, __FILE__, __LINE__)
#define GT_CUDA_CHECK_LAUNCH() ::geotrain::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
#define GT_CUDA_WARN(call) ::geotrain::warn_cuda((call), #call, __FILE__, __LINE__)
