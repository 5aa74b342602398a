// Fully connected layer, CPU twin: three OpenBLAS sgemm calls (row-major).
//   forward:  out[N,OC]     = inp[N,C] . weight[OC,C]^T (+ bias[OC])
//   backward: dinp[N,C]     += dout[N,OC] . weight[OC,C]
//             dweight[OC,C] += dout^T[OC,N] . inp[N,C]
//             dbias[OC]     += column sums of dout (an sgemv with ones)
// The gradients accumulate through beta = 1: no temporaries, no extra pass.
// Threading is OpenBLAS's own, and with fp32 operands nothing here runs in
// the OpenMP pool (the reason is in cpu_backend.cpp).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu_blas.hpp"
#include "cpu_math.hpp"
#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"

namespace geotrain::kernels::cpu {
namespace {

// With MatmulPrecision::bf16 a GEMM operand is replaced by a bf16-rounded
// copy held in `storage`; with fp32 the operand is used as it is. (The
// OpenMP loop costs a pool hand-over, acceptable in this parity-test mode.)
const float* gemm_operand(const float* x, std::size_t n, MatmulPrecision precision,
                          std::vector<float>& storage) {
  if (precision == MatmulPrecision::fp32) return x;
  storage.resize(n);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t i = 0; i < n; ++i) storage[i] = round_to_bf16(x[i]);
  return storage.data();
}

// A vector of n ones, for the two bias GEMMs below; grows, never shrinks.
const float* ones(int n) {
  thread_local std::vector<float> storage;
  if (storage.size() < static_cast<std::size_t>(n)) storage.assign(static_cast<std::size_t>(n), 1.0f);
  return storage.data();
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                    int OC, MatmulPrecision precision) {
  std::vector<float> inp_storage, weight_storage;
  const float* a = gemm_operand(inp, static_cast<std::size_t>(N) * C, precision, inp_storage);
  const float* w = gemm_operand(weight, static_cast<std::size_t>(OC) * C, precision, weight_storage);
  // The bias rows are written first, as the rank-1 product ones[N] bias[OC]^T,
  // and the main sgemm adds onto them (beta = 1): one pass over out, and all
  // of matmul stays in OpenBLAS's thread pool (see cpu_backend.cpp).
  float beta = 0.0f;
  if (bias != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, 1, 1.0f, ones(N), 1, bias, OC, 0.0f, out, OC);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, a, C, w, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, MatmulPrecision precision) {
  std::vector<float> dout_storage, inp_storage, weight_storage;
  const float* g = gemm_operand(dout, static_cast<std::size_t>(N) * OC, precision, dout_storage);
  const float* a = gemm_operand(inp, static_cast<std::size_t>(N) * C, precision, inp_storage);
  const float* w = gemm_operand(weight, static_cast<std::size_t>(OC) * C, precision, weight_storage);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, g, OC, w, C, 1.0f, dinp, C);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, g, OC, a, C, 1.0f, dweight, C);
  // dbias += dout^T ones[N]: the column sums, as a GEMV on the fp32 dout in
  // either precision (the bias is not a GEMM operand on the GPU either).
  if (dbias != nullptr) {
    cblas_sgemv(CblasRowMajor, CblasTrans, N, OC, 1.0f, dout, OC, ones(N), 1, 1.0f, dbias, 1);
  }
}

}  // namespace geotrain::kernels::cpu
