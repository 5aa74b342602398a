// The CUDA emulation's cuBLAS: the subset the kernels use. GEMMs run as a
// column-major reference GEMM with double accumulation (runtime/cublas.cpp).
#pragma once
#include "cuda_emu.hpp"

struct cublasContext;
typedef cublasContext* cublasHandle_t;
// The status codes, with cuBLAS's values, as one list: the enum and
// cublasGetStatusName (runtime/cublas.cpp) are both made from it.
#define CUDA_EMU_CUBLAS_STATUSES(X)                                                                                   \
  X(CUBLAS_STATUS_SUCCESS, 0) X(CUBLAS_STATUS_NOT_INITIALIZED, 1) X(CUBLAS_STATUS_ALLOC_FAILED, 3)                  \
  X(CUBLAS_STATUS_INVALID_VALUE, 7) X(CUBLAS_STATUS_ARCH_MISMATCH, 8) X(CUBLAS_STATUS_MAPPING_ERROR, 11)            \
  X(CUBLAS_STATUS_EXECUTION_FAILED, 13) X(CUBLAS_STATUS_INTERNAL_ERROR, 14) X(CUBLAS_STATUS_NOT_SUPPORTED, 15)
enum cublasStatus_t {
#define CUDA_EMU_ENUMERATOR(name, value) name = value,
  CUDA_EMU_CUBLAS_STATUSES(CUDA_EMU_ENUMERATOR)
#undef CUDA_EMU_ENUMERATOR
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
typedef cudaDataType cudaDataType_t;
enum cublasComputeType_t { CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_TF32_TENSOR_OP_MATH = 3 };

cublasStatus_t cublasCreate(cublasHandle_t*);
cublasStatus_t cublasDestroy(cublasHandle_t);
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t);
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t);
cublasStatus_t cublasGetVersion(cublasHandle_t, int*);
const char* cublasGetStatusName(cublasStatus_t);
const char* cublasGetStatusString(cublasStatus_t);
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType, int lda, const void* B, cudaDataType,
                            int ldb, const void* beta, void* C, cudaDataType, int ldc, cublasComputeType_t,
                            cublasGemmAlgo_t);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType, int lda, long long strideA,
                                          const void* B, cudaDataType, int ldb, long long strideB, const void* beta,
                                          void* C, cudaDataType, int ldc, long long strideC, int batchCount,
                                          cublasComputeType_t, cublasGemmAlgo_t);
