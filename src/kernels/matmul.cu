// Linear layer on cuBLAS, forward and backward, and the GEMM layer under it.
//   forward:  out[N,OC] = inp[N,C] @ weight[OC,C]^T (+ bias[OC])
//   backward: dinp[N,C] += dout @ weight;  dweight[OC,C] += dout^T @ inp;
//             dbias[OC] += column sums of dout
// Row-major tensors are column-major transposes to cuBLAS: a row-major X[R,K]
// is the column-major K x R matrix with leading dimension K. So
//   out^T     = weight(op T) * inp^T          gemm(T, N, OC, N, C)
//   dinp^T   += weight^T(op N) * dout^T       gemm(N, N, C, N, OC)
//   dweight^T += inp^T(op N) * dout(op T)     gemm(N, T, C, OC, N)
// Precision: fp32 mode runs cublasGemmEx with fp32 operands and
// CUBLAS_COMPUTE_32F (exact SGEMM; no TF32). bf16 mode rounds each operand to
// bf16 (round to nearest even) into a scratch buffer and runs cublasGemmEx
// with CUDA_R_16BF inputs, CUDA_R_32F output and CUBLAS_COMPUTE_32F: bf16
// tensor cores, fp32 accumulation, fp32 result (also for beta = 1).
#include <cuda_bf16.h>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"

namespace geotrain::kernels::cuda {
namespace {

__global__ void add_bias_kernel(float* out, const float* bias, int OC, std::size_t total) {
  for (std::size_t i = global_index(); i < total; i += global_stride()) out[i] += bias[i % OC];
}

// partial[chunk, c]: the column sums of `in`, chunk by chunk (column_chunk_partials).
__global__ void column_partials_kernel(float* partial, const float* in, int rows, int cols, int chunks) {
  column_chunk_partials(partial, rows, cols, chunks, [in](std::size_t i) { return in[i]; });
}

__global__ void column_finish_kernel(float* out, const float* partial, int chunks, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (int k = 0; k < chunks; ++k) sum += partial[static_cast<std::size_t>(k) * cols + c];
  out[c] += sum;
}

bool is_bf16(const Context& ctx) { return ctx.precision == MatmulPrecision::bf16; }

}  // namespace

const void* gemm_operand(const Context& ctx, const float* x, std::size_t count, Scratch& scratch) {
  if (!is_bf16(ctx) || count == 0) return x;
  auto* copy = scratch.get<std::uint16_t>(count, ctx.stream);
  to_bf16(ctx, copy, x, count);  // bf16_storage.cu
  return copy;
}

void gemm(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
          const void* A, int lda, long long stride_a, const void* B, int ldb, long long stride_b, float beta,
          float* Cmat, int ldc, long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const cudaDataType input_type = is_bf16(ctx) ? CUDA_R_16BF : CUDA_R_32F;
  if (batch == 1) {
    GT_CUDA_CHECK(cublasGemmEx(ctx.blas, op_a, op_b, m, n, k, &alpha, A, input_type, lda, B, input_type, ldb,
                                     &beta, Cmat, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    GT_CUDA_CHECK(cublasGemmStridedBatchedEx(ctx.blas, op_a, op_b, m, n, k, &alpha, A, input_type, lda,
                                                   stride_a, B, input_type, ldb, stride_b, &beta, Cmat, CUDA_R_32F,
                                                   ldc, stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void column_sums_accumulate(const Context& ctx, float* out, const float* in, int rows, int cols) {
  if (rows == 0 || cols == 0) return;
  const int chunks = static_cast<int>(ceil_div(rows, kColumnSumRows));
  float* partial = ctx.work->partials.get<float>(static_cast<std::size_t>(chunks) * cols, ctx.stream);
  const dim3 block(kColumnTile, kColumnRowLanes);
  const dim3 grid(ceil_div(cols, kColumnTile), std::min(chunks, kMaxGridY));
  column_partials_kernel<<<grid, block, 0, ctx.stream>>>(partial, in, rows, cols, chunks);
  GT_CUDA_CHECK_LAUNCH();
  column_partials_accumulate(ctx, out, partial, chunks, cols);
}

void column_partials_accumulate(const Context& ctx, float* out, const float* partial, int chunks, int cols) {
  column_finish_kernel<<<ceil_div(cols, 256), 256, 0, ctx.stream>>>(out, partial, chunks, cols);
  GT_CUDA_CHECK_LAUNCH();
}

void matmul_forward(const Context& ctx, float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  if (N == 0 || OC == 0) return;
  const std::size_t total = static_cast<std::size_t>(N) * OC;
  if (C == 0) {
    GT_CUDA_CHECK(cudaMemsetAsync(out, 0, total * sizeof(float), ctx.stream));
  } else {
    Workspace& w = *ctx.work;
    const void* a = gemm_operand(ctx, weight, static_cast<std::size_t>(OC) * C, w.gemm_operand[0]);
    const void* b = gemm_operand(ctx, inp, static_cast<std::size_t>(N) * C, w.gemm_operand[1]);
    gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, a, C, 0, b, C, 0, 0.0f, out, OC, 0, 1);
  }
  if (bias != nullptr) {
    add_bias_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, ctx.stream>>>(out, bias, OC, total);
    GT_CUDA_CHECK_LAUNCH();
  }
}

void matmul_backward(const Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  if (N == 0 || OC == 0) return;
  if (dbias != nullptr) column_sums_accumulate(ctx, dbias, dout, N, OC);
  if (C == 0) return;
  Workspace& w = *ctx.work;
  const void* g = gemm_operand(ctx, dout, static_cast<std::size_t>(N) * OC, w.gemm_operand[0]);
  const void* wt = gemm_operand(ctx, weight, static_cast<std::size_t>(OC) * C, w.gemm_operand[1]);
  const void* x = gemm_operand(ctx, inp, static_cast<std::size_t>(N) * C, w.gemm_operand[2]);
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, wt, C, 0, g, OC, 0, 1.0f, dinp, C, 0, 1);
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, x, C, 0, g, OC, 0, 1.0f, dweight, C, 0, 1);
}

}  // namespace geotrain::kernels::cuda
