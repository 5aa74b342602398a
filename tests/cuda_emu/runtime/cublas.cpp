// cuBLAS GemmEx and GemmStridedBatchedEx as a column-major reference GEMM
// (fp32 or bf16 operands, double accumulation, fp32 out): every operand's
// reach is checked against its device allocation, and the work goes on the
// handle's stream like any kernel.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cublas_v2.h"
#include "cuda_emu_engine.hpp"

using namespace cuda_emu;

struct cublasContext {
  cudaStream_t stream = nullptr;
};
cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGetVersion(cublasHandle_t, int* v) {
  *v = 0;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
#define CUDA_EMU_NAME_CASE(name, value) \
  case name: return #name;
    CUDA_EMU_CUBLAS_STATUSES(CUDA_EMU_NAME_CASE)
#undef CUDA_EMU_NAME_CASE
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }

namespace {
float load(const void* base, cudaDataType type, std::size_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[i];
  const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(base)[i]) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
std::size_t element_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const void* alpha_p, const void* A, cudaDataType at, int lda, long long sa, const void* B,
                    cudaDataType bt, int ldb, long long sb, const void* beta_p, void* C, cudaDataType ct, int ldc,
                    long long sc, int batch, cublasComputeType_t compute) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!(at == bt && (at == CUDA_R_32F || at == CUDA_R_16BF) && ct == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const double alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
  // Every byte each operand's batches reach must lie in one device allocation.
  const auto span = [&](long long stride, int ld, int rows, int cols, std::size_t size) -> std::size_t {
    if (rows == 0 || cols == 0) return 0;
    return (static_cast<std::size_t>(batch - 1) * stride + static_cast<std::size_t>(cols - 1) * ld + rows) * size;
  };
  const std::size_t a_bytes = k > 0 ? span(sa, lda, a_rows, a_cols, element_size(at)) : 0;
  const std::size_t b_bytes = k > 0 ? span(sb, ldb, b_rows, b_cols, element_size(bt)) : 0;
  const std::size_t c_bytes = span(sc, ldc, m, n, 4);
  if ((a_bytes && !is_device_range(A, a_bytes)) || (b_bytes && !is_device_range(B, b_bytes)) ||
      !is_device_range(C, c_bytes)) {
    fatal("cublasGemm: an operand reaches outside its device allocation (m %d n %d k %d lda %d ldb %d ldc %d batch %d)",
          m, n, k, lda, ldb, ldc, batch);
  }
  const auto overlaps = [](const void* x, std::size_t xb, const void* y, std::size_t yb) {
    const auto* p = static_cast<const char*>(x);
    const auto* q = static_cast<const char*>(y);
    return xb && yb && p < q + yb && q < p + xb;
  };
  if (overlaps(A, a_bytes, C, c_bytes) || overlaps(B, b_bytes, C, c_bytes)) fatal("cublasGemm: C overlaps A or B");
  enqueue(h->stream, [=] {
    std::vector<float> ap(static_cast<std::size_t>(m) * k), bp(static_cast<std::size_t>(n) * k);
    for (int b = 0; b < batch; ++b) {
      const std::size_t a0 = static_cast<std::size_t>(b) * sa, b0 = static_cast<std::size_t>(b) * sb;
      // op(A) row i and op(B) column j, contiguous in p.
      for (int i = 0; i < m; ++i)
        for (int p = 0; p < k; ++p)
          ap[static_cast<std::size_t>(i) * k + p] =
              load(A, at, a0 + (ta == CUBLAS_OP_N ? i + static_cast<std::size_t>(p) * lda : p + static_cast<std::size_t>(i) * lda));
      for (int j = 0; j < n; ++j)
        for (int p = 0; p < k; ++p)
          bp[static_cast<std::size_t>(j) * k + p] =
              load(B, bt, b0 + (tb == CUBLAS_OP_N ? p + static_cast<std::size_t>(j) * ldb : j + static_cast<std::size_t>(p) * ldb));
      float* c = static_cast<float*>(C) + static_cast<std::size_t>(b) * sc;
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          const float* x = &ap[static_cast<std::size_t>(i) * k];
          const float* y = &bp[static_cast<std::size_t>(j) * k];
          double sum = 0.0;
          for (int p = 0; p < k; ++p) sum += static_cast<double>(x[p]) * y[p];
          float& out = c[i + static_cast<std::size_t>(j) * ldc];
          out = static_cast<float>(alpha * sum + (beta == 0.0 ? 0.0 : beta * out));  // beta 0: C is not read
        }
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                            cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, compute);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          long long sa, const void* B, cudaDataType bt, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType ct, int ldc, long long sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute);
}
