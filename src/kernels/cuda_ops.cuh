// The CUDA implementations of the Backend ops (include/geotrain/kernels/
// backend.hpp has the semantics: shapes, accumulation, eps, scales). One .cu
// per op, forward and backward side by side; CudaBackend (cuda_backend.cu)
// owns the stream, the cuBLAS handle and the scratch memory and calls these.
//
// Every function queues its work on ctx.stream and returns without waiting,
// except sum_of_squares, which returns a value to the host, and
// crossentropy_forward, which waits to check the targets (as the CPU twin,
// it throws RunError for a target outside [0, V)). Pointers are
// device pointers. Functions return at once when the problem is empty.
//
// Determinism: no floating-point atomics anywhere. Reductions run in a fixed
// order that depends only on the shapes, so the same inputs give bitwise the
// same outputs on the same GPU model (cuBLAS is deterministic for one handle
// on one stream).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "geotrain/common/cuda_check.hpp"
#include "geotrain/kernels/backend.hpp"

namespace geotrain::kernels::cuda {

// A growable device buffer for temporaries. Growing waits for the stream
// first, so kernels queued on the old buffer finish before it is freed.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (data_ != nullptr) GT_CUDA_WARN(cudaFree(data_));
  }

  // At least `bytes` bytes (256-byte aligned), valid until the next call that
  // grows this buffer.
  void* bytes(std::size_t bytes, cudaStream_t stream) {
    if (bytes <= size_ && data_ != nullptr) return data_;
    constexpr std::size_t kGranule = std::size_t{1} << 20;
    const std::size_t wanted = std::max<std::size_t>((bytes + kGranule - 1) / kGranule * kGranule, kGranule);
    GT_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (data_ != nullptr) {
      GT_CUDA_CHECK(cudaFree(data_));
      data_ = nullptr;
      size_ = 0;
    }
    GT_CUDA_CHECK(cudaMalloc(&data_, wanted));
    size_ = wanted;
    return data_;
  }
  template <class T>
  T* get(std::size_t count, cudaStream_t stream) {
    return static_cast<T*>(bytes(count * sizeof(T), stream));
  }
  std::size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// Named temporaries; an op may use several at once, never one twice.
struct Workspace {
  Scratch gemm_operand[3];  // bf16 copies of GEMM operands (bf16 mode only)
  Scratch partials;         // partial sums of the deterministic reductions
  Scratch sort;             // embedding backward: CUB temporaries, sorted tokens and positions
  Scratch flags;            // crossentropy: first row with a target outside [0, V)
};

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  MatmulPrecision precision = MatmulPrecision::fp32;
  Workspace* work = nullptr;
};

// ---- embedding.cu
void embedding_forward(const Context& ctx, float* out, const int* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
void embedding_backward(const Context& ctx, float* dwte, float* dwpe, const float* dout, const int* tokens, int B,
                        int T, int C);
void embedding_shard_forward(const Context& ctx, float* out, const int* tokens, const float* wte_rows,
                             const float* wpe, int B, int T, int C, int vocab_begin, int vocab_rows);
void embedding_shard_backward(const Context& ctx, float* dwte_rows, float* dwpe, const float* dout,
                              const int* tokens, int B, int T, int C, int vocab_begin, int vocab_rows);

// ---- layernorm.cu
void layernorm_forward(const Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C);
void residual_layernorm_forward(const Context& ctx, float* residual, float* out, float* mean, float* rstd,
                                const float* a, const float* b, const float* weight, const float* bias, int N, int C);
void layernorm_backward(const Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd, int N, int C);

// ---- matmul.cu
void matmul_forward(const Context& ctx, float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC);
void matmul_backward(const Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC);
// The GEMM layer under matmul (attention.cu has its own fused kernels). gemm_operand returns x itself
// in fp32 mode, or a bf16 copy of its `count` values held in `scratch`.
const void* gemm_operand(const Context& ctx, const float* x, std::size_t count, Scratch& scratch);
// Column-major, as cuBLAS: C = alpha op(A) op(B) + beta C for `batch`
// matrices at the given strides (elements). A and B come from gemm_operand
// (their type follows ctx.precision); C is fp32; fp32 accumulation.
void gemm(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
          const void* A, int lda, long long stride_a, const void* B, int ldb, long long stride_b, float beta,
          float* Cmat, int ldc, long long stride_c, int batch);
// out[c] += sum over r of in[r, c] for in[rows, cols], in a fixed order.
void column_sums_accumulate(const Context& ctx, float* out, const float* in, int rows, int cols);
// The second half of that reduction, for kernels that write their own
// partial[chunks, cols] (one row per kColumnSumRows rows of input): out[c] +=
// the partials of column c in chunk order.
constexpr int kColumnSumRows = 128;
void column_partials_accumulate(const Context& ctx, float* out, const float* partial, int chunks, int cols);
// The first half, in a kernel of blocks (kColumnTile, kColumnRowLanes) on a
// grid (ceil(cols / kColumnTile), min(chunks, kMaxGridY)): partial[chunk, c]
// = the sum of value(r * cols + c) over the chunk's rows r, in a fixed order
// (each lane its rows, then lane 0 adds the lanes in order), whatever the
// grid; blocks stride over the chunks, so rows > 65535 * 128 launch too.
// value(i) may also write element i (dgelu writes dpre as it sums it).
constexpr int kColumnTile = 32;     // columns per block
constexpr int kColumnRowLanes = 8;  // threads per column
template <class Value>
__device__ void column_chunk_partials(float* partial, int rows, int cols, int chunks, Value value) {
  __shared__ float shared[kColumnRowLanes][kColumnTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kColumnTile + tx;
  for (int chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int row_end = min(rows, (chunk + 1) * kColumnSumRows);
    float sum = 0.0f;
    if (c < cols) {
      for (int r = chunk * kColumnSumRows + ty; r < row_end; r += kColumnRowLanes) {
        sum += value(static_cast<std::size_t>(r) * cols + c);
      }
    }
    __syncthreads();  // the previous chunk's reads of `shared` are done
    shared[ty][tx] = sum;
    __syncthreads();
    if (ty == 0 && c < cols) {
      for (int k = 1; k < kColumnRowLanes; ++k) sum += shared[k][tx];
      partial[static_cast<std::size_t>(chunk) * cols + c] = sum;
    }
  }
}

// ---- attention.cu
void attention_forward(const Context& ctx, float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
void attention_backward(const Context& ctx, float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* lse, int B, int T, int C, int NH);

// ---- gelu.cu
void gelu_forward(const Context& ctx, float* out, const float* inp, std::size_t n);
void gelu_backward(const Context& ctx, float* dinp, const float* inp, const float* dout, std::size_t n);
void matmul_gelu_forward(const Context& ctx, float* out, float* pre, const float* inp, const float* weight,
                         const float* bias, int N, int C, int OC);
void matmul_gelu_backward(const Context& ctx, float* dinp, float* dweight, float* dbias, float* dpre,
                          const float* dout, const float* pre, const float* inp, const float* weight, int N, int C,
                          int OC);

// ---- residual.cu
void residual_forward(const Context& ctx, float* out, const float* a, const float* b, std::size_t n);
void accumulate(const Context& ctx, float* y, const float* x, std::size_t n);
void scale(const Context& ctx, float* x, float factor, std::size_t n);
double sum_of_squares(const Context& ctx, const float* x, std::size_t n);

// ---- bf16_storage.cu
void to_bf16(const Context& ctx, std::uint16_t* out, const float* in, std::size_t n);
void from_bf16(const Context& ctx, float* out, const std::uint16_t* in, std::size_t n);

// ---- crossentropy.cu
void crossentropy_forward(const Context& ctx, float* losses, const float* logits, const int* targets, int N, int V);
void crossentropy_backward(const Context& ctx, float* dlogits, const float* logits, const int* targets, float dloss,
                           int N, int V);
void crossentropy_shard_max(const Context& ctx, float* row_max, const float* logits, int N, int V);
void crossentropy_shard_statistics(const Context& ctx, float* stats, const float* logits, const int* targets,
                                   const float* row_max, int N, int V, int vocab_begin);
void crossentropy_shard_backward(const Context& ctx, float* dlogits, const float* logits, const int* targets,
                                 const float* row_max, const float* stats, float dloss, int N, int V,
                                 int vocab_begin);

// ---- adamw.cu
void adamw_update(const Context& ctx, float* params, const float* grads, float* m, float* v, std::size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int step);

}  // namespace geotrain::kernels::cuda
