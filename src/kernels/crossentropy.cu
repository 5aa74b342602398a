// Softmax + cross-entropy, fused and numerically stable, forward and backward.
//   forward:  losses[n] = log(sum_v exp(x_v - max)) - (x_target - max)   (natural log)
//   backward: dlogits[n,v] = (softmax(x)_v - [v == target]) * dloss   (overwrites)
// One block of 256 threads per row; max and sum are fp32 block reductions in
// a fixed order (deterministic). A target outside [0, V) is never read past:
// the forward records the first such row and, like the CPU twin, throws
// RunError naming it (one stream synchronisation per call; the caller
// downloads the losses right after anyway); the backward writes NaN there.
// The vocabulary-parallel passes (crossentropy_shard_*: row maxima, then
// sum of exp and target term, then the gradient, around the caller's sums
// over the group) use the same block per row and the same fixed-order block
// reductions; a target outside the shard is normal there (another rank holds
// it) and contributes nothing.
#include <climits>
#include <string>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "geotrain/common/errors.hpp"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct RowStatistics {
  float maximum;
  float sum;  // sum of exp(x - maximum)
};

__device__ RowStatistics row_statistics(const float* x, int V, float* shared) {
  float maximum = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) maximum = fmaxf(maximum, x[v]);
  maximum = block_max(maximum, shared);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(x[v] - maximum);
  sum = block_sum(sum, shared);
  return {maximum, sum};
}

__global__ void crossentropy_forward_kernel(float* losses, int* first_bad_row, const float* logits,
                                            const int* targets, int V) {
  __shared__ float shared[kWarpSize];
  const int row = blockIdx.x;
  const float* x = logits + static_cast<std::size_t>(row) * V;
  const RowStatistics s = row_statistics(x, V, shared);
  if (threadIdx.x == 0) {
    const int target = targets[row];
    if (target >= 0 && target < V) {
      // As the CPU twin: log(sum) - (x_target - max). The other grouping,
      // (log(sum) + max) - x_target, rounds log(sum) to the ulp of max (about
      // 3e-5 for a max of ~300, the golden case's large row), which is larger
      // than a small loss itself; x_target - max is exact when the target is
      // (near) the maximum.
      losses[row] = logf(s.sum) - (x[target] - s.maximum);
    } else {
      losses[row] = NAN;
      atomicMin(first_bad_row, row);  // integer: the result is order-independent
    }
  }
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const int* targets, float dloss,
                                             int V) {
  __shared__ float shared[kWarpSize];
  const int row = blockIdx.x;
  const std::size_t offset = static_cast<std::size_t>(row) * V;
  const float* x = logits + offset;
  float* d = dlogits + offset;
  const RowStatistics s = row_statistics(x, V, shared);
  const int target = targets[row];
  const bool valid = target >= 0 && target < V;
  const float inverse = 1.0f / s.sum;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float p = expf(x[v] - s.maximum) * inverse;
    d[v] = valid ? (p - (v == target ? 1.0f : 0.0f)) * dloss : NAN;
  }
}

__global__ void crossentropy_shard_max_kernel(float* row_max, const float* logits, int V) {
  __shared__ float shared[kWarpSize];
  const int row = blockIdx.x;
  const float* x = logits + static_cast<std::size_t>(row) * V;
  float maximum = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) maximum = fmaxf(maximum, x[v]);
  maximum = block_max(maximum, shared);
  if (threadIdx.x == 0) row_max[row] = maximum;
}

// The sum in fp32 as crossentropy_forward's (each thread a strided partial,
// then the block tree); the CPU twin sums in double.
__global__ void crossentropy_shard_statistics_kernel(float* stats, const float* logits, const int* targets,
                                                     const float* row_max, int V, int vocab_begin) {
  __shared__ float shared[kWarpSize];
  const int row = blockIdx.x;
  const float* x = logits + static_cast<std::size_t>(row) * V;
  const float maximum = row_max[row];
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(x[v] - maximum);
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    // In 64 bits: targets[row] - vocab_begin may not fit an int.
    const long long local = static_cast<long long>(targets[row]) - vocab_begin;
    stats[2 * static_cast<std::size_t>(row)] = sum;
    stats[2 * static_cast<std::size_t>(row) + 1] = local >= 0 && local < V ? x[local] - maximum : 0.0f;
  }
}

// As the CPU twin: exp(x - max) * (1 / sum) * dloss, then - dloss at the target.
__global__ void crossentropy_shard_backward_kernel(float* dlogits, const float* logits, const int* targets,
                                                   const float* row_max, const float* stats, float dloss, int V,
                                                   int vocab_begin) {
  const int row = blockIdx.x;
  const std::size_t offset = static_cast<std::size_t>(row) * V;
  const float* x = logits + offset;
  float* d = dlogits + offset;
  const float maximum = row_max[row];
  const float inverse = 1.0f / stats[2 * static_cast<std::size_t>(row)];
  const long long local = static_cast<long long>(targets[row]) - vocab_begin;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float value = expf(x[v] - maximum) * inverse * dloss;
    d[v] = v == local ? value - dloss : value;
  }
}

}  // namespace

void crossentropy_forward(const Context& ctx, float* losses, const float* logits, const int* targets, int N, int V) {
  if (N == 0) return;
  int* first_bad_row = ctx.work->flags.get<int>(1, ctx.stream);
  // Bytes 0x7f: 0x7f7f7f7f, larger than any row index.
  GT_CUDA_CHECK(cudaMemsetAsync(first_bad_row, 0x7f, sizeof(int), ctx.stream));
  crossentropy_forward_kernel<<<N, kThreads, 0, ctx.stream>>>(losses, first_bad_row, logits, targets, V);
  GT_CUDA_CHECK_LAUNCH();
  int bad_row = INT_MAX;
  GT_CUDA_CHECK(cudaMemcpyAsync(&bad_row, first_bad_row, sizeof bad_row, cudaMemcpyDeviceToHost, ctx.stream));
  GT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  if (bad_row < N) {
    int target = 0;
    GT_CUDA_CHECK(
        cudaMemcpyAsync(&target, targets + bad_row, sizeof target, cudaMemcpyDeviceToHost, ctx.stream));
    GT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    throw RunError("crossentropy: target " + std::to_string(target) + " of row " + std::to_string(bad_row) +
                   " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
}

void crossentropy_backward(const Context& ctx, float* dlogits, const float* logits, const int* targets, float dloss,
                           int N, int V) {
  if (N == 0) return;
  crossentropy_backward_kernel<<<N, kThreads, 0, ctx.stream>>>(dlogits, logits, targets, dloss, V);
  GT_CUDA_CHECK_LAUNCH();
}

void crossentropy_shard_max(const Context& ctx, float* row_max, const float* logits, int N, int V) {
  if (N == 0) return;
  crossentropy_shard_max_kernel<<<N, kThreads, 0, ctx.stream>>>(row_max, logits, V);
  GT_CUDA_CHECK_LAUNCH();
}

void crossentropy_shard_statistics(const Context& ctx, float* stats, const float* logits, const int* targets,
                                   const float* row_max, int N, int V, int vocab_begin) {
  if (N == 0) return;
  crossentropy_shard_statistics_kernel<<<N, kThreads, 0, ctx.stream>>>(stats, logits, targets, row_max, V,
                                                                       vocab_begin);
  GT_CUDA_CHECK_LAUNCH();
}

void crossentropy_shard_backward(const Context& ctx, float* dlogits, const float* logits, const int* targets,
                                 const float* row_max, const float* stats, float dloss, int N, int V,
                                 int vocab_begin) {
  if (N == 0 || V == 0) return;
  crossentropy_shard_backward_kernel<<<N, kThreads, 0, ctx.stream>>>(dlogits, logits, targets, row_max, stats,
                                                                     dloss, V, vocab_begin);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
