// Residual add and the small vector ops of the training loop.
//   residual_forward: out = a + b  (its backward is the identity on both inputs)
//   accumulate: y += x;  scale: x *= factor
//   sum_of_squares: sum x^2 in double, for gradient-norm clipping.
// sum_of_squares is deterministic: a grid whose size depends only on n, each
// thread summing a fixed strided subset in double, a shared-memory tree per
// block, then one block summing the block results in a fixed tree.
#include "cuda_common.cuh"
#include "cuda_ops.cuh"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kReduceThreads = 256;
constexpr unsigned kReduceBlocks = 1024;  // at most; also the threads of the final block

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) out[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(float* y, const float* x, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) y[i] += x[i];
}

__global__ void scale_kernel(float* x, float factor, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) x[i] *= factor;
}

// Tree sum of shared[0..blockDim.x) (a power of two) into shared[0].
__device__ void block_tree_sum(double* shared) {
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
}

__global__ void sum_of_squares_partials_kernel(double* partial, const float* x, std::size_t n) {
  __shared__ double shared[kReduceThreads];
  double sum = 0.0;
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const double value = x[i];
    sum += value * value;
  }
  shared[threadIdx.x] = sum;
  __syncthreads();
  block_tree_sum(shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

__global__ void sum_partials_kernel(double* result, const double* partial, unsigned count) {
  __shared__ double shared[kReduceBlocks];
  shared[threadIdx.x] = threadIdx.x < count ? partial[threadIdx.x] : 0.0;
  __syncthreads();
  block_tree_sum(shared);
  if (threadIdx.x == 0) *result = shared[0];
}

}  // namespace

void residual_forward(const Context& ctx, float* out, const float* a, const float* b, std::size_t n) {
  if (n == 0) return;
  residual_forward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(out, a, b, n);
  GT_CUDA_CHECK_LAUNCH();
}

void accumulate(const Context& ctx, float* y, const float* x, std::size_t n) {
  if (n == 0) return;
  accumulate_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(y, x, n);
  GT_CUDA_CHECK_LAUNCH();
}

void scale(const Context& ctx, float* x, float factor, std::size_t n) {
  if (n == 0) return;
  scale_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream>>>(x, factor, n);
  GT_CUDA_CHECK_LAUNCH();
}

double sum_of_squares(const Context& ctx, const float* x, std::size_t n) {
  if (n == 0) return 0.0;
  const auto blocks = static_cast<unsigned>(
      std::min<std::size_t>((n + kReduceThreads - 1) / kReduceThreads, kReduceBlocks));
  double* partial = ctx.work->partials.get<double>(kReduceBlocks + 1, ctx.stream);
  double* result = partial + kReduceBlocks;
  sum_of_squares_partials_kernel<<<blocks, kReduceThreads, 0, ctx.stream>>>(partial, x, n);
  GT_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kReduceBlocks, 0, ctx.stream>>>(result, partial, blocks);
  GT_CUDA_CHECK_LAUNCH();
  double host = 0.0;
  GT_CUDA_CHECK(cudaMemcpyAsync(&host, result, sizeof host, cudaMemcpyDeviceToHost, ctx.stream));
  GT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  return host;
}

}  // namespace geotrain::kernels::cuda
