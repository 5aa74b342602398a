// LayerNorm over the last dimension (eps 1e-5), forward and backward.
//   forward:  mean, rstd = 1/sqrt(var + eps) per row (fp32, two passes over
//             the row: mean first, then the centred variance); out = (x-mean)*rstd*w + b
//   backward: norm = (x-mean)*rstd, g = dout*w
//             dinp    += rstd * (g - mean(g) - norm * mean(g*norm))
//             dweight += sum_rows dout*norm;  dbias += sum_rows dout
// residual_layernorm_forward: the residual add (a + b, stored) fused in front of the forward.
// One warp per row (8 rows per 256-thread block) for the row-wise parts. The
// parameter gradients are a deterministic two-pass column reduction: blocks
// of 32 columns x kRowsPerChunk rows write partial sums, then one thread per
// column adds the partials in chunk order.
#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "op_constants.hpp"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kRowThreads = 256;  // 8 warps, one row each
constexpr int kRowsPerBlock = kRowThreads / kWarpSize;
// The column reduction's block and chunk: those of column_chunk_partials
// (cuda_ops.cuh), with two sums (weight and bias) per column.
constexpr int kRowLanes = kColumnRowLanes;
constexpr int kRowsPerChunk = kColumnSumRows;

// The rest of one warp's row once each lane holds the sum of its columns of x
// (x[c] for c = lane, lane + 32, ...): the mean, the centred variance, out and
// the row's statistics (lane 0).
__device__ __forceinline__ void normalise_row(float* o, float* mean, float* rstd, const float* x, const float* weight,
                                              const float* bias, int row, int lane, float sum, int C) {
  const float m = warp_sum(sum) / C;
  float squares = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float d = x[c] - m;
    squares += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(squares) / C + kLayerNormEps);
  for (int c = lane; c < C; c += kWarpSize) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* x = inp + static_cast<std::size_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sum += x[c];
  normalise_row(out + static_cast<std::size_t>(row) * C, mean, rstd, x, weight, bias, row, lane, sum, C);
}

// layernorm_forward_kernel with the residual add in its first loop: each lane
// writes the sums of its columns and reads back only those (residual may be a
// or b), in the order layernorm_forward_kernel reads them, so the statistics
// and out are bitwise those of residual_forward + layernorm_forward; the
// re-reads hit the cache instead of a second pass over global memory.
__global__ void residual_layernorm_forward_kernel(float* residual, float* out, float* mean, float* rstd,
                                                  const float* a, const float* b, const float* weight,
                                                  const float* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const std::size_t offset = static_cast<std::size_t>(row) * C;
  float* x = residual + offset;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float r = a[offset + c] + b[offset + c];
    x[c] = r;
    sum += r;
  }
  normalise_row(out + offset, mean, rstd, x, weight, bias, row, lane, sum, C);
}

__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* weight, const float* mean, const float* rstd, int N,
                                                int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const std::size_t offset = static_cast<std::size_t>(row) * C;
  const float* x = inp + offset;
  const float* g = dout + offset;
  const float m = mean[row], s = rstd[row];
  float sum_g = 0.0f, sum_g_norm = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float gw = g[c] * weight[c];
    sum_g += gw;
    sum_g_norm += gw * (x[c] - m) * s;
  }
  const float mean_g = warp_sum(sum_g) / C;
  const float mean_g_norm = warp_sum(sum_g_norm) / C;
  float* d = dinp + offset;
  for (int c = lane; c < C; c += kWarpSize) {
    const float norm = (x[c] - m) * s;
    d[c] += s * (g[c] * weight[c] - mean_g - norm * mean_g_norm);
  }
}

// Block (32, 8), grid (ceil(C/32), min(chunks, 65535)): partial sums of
// dout*norm and dout over each chunk's rows, for 32 columns. gridDim.y is at
// most 65535, so blocks stride over the chunks (N > 65535 * 128 rows would
// otherwise be a launch error); the result does not depend on the grid.
__global__ void layernorm_backward_partials_kernel(float* partial_weight, float* partial_bias, const float* dout,
                                                   const float* inp, const float* mean, const float* rstd, int N,
                                                   int C, int chunks) {
  __shared__ float shared_weight[kRowLanes][kColumnTile + 1];
  __shared__ float shared_bias[kRowLanes][kColumnTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kColumnTile + tx;
  for (int chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int row_end = min(N, (chunk + 1) * kRowsPerChunk);
    float sum_weight = 0.0f, sum_bias = 0.0f;
    if (c < C) {
      for (int r = chunk * kRowsPerChunk + ty; r < row_end; r += kRowLanes) {
        const std::size_t i = static_cast<std::size_t>(r) * C + c;
        const float g = dout[i];
        sum_weight += g * (inp[i] - mean[r]) * rstd[r];
        sum_bias += g;
      }
    }
    __syncthreads();  // the previous chunk's reads of the shared arrays are done
    shared_weight[ty][tx] = sum_weight;
    shared_bias[ty][tx] = sum_bias;
    __syncthreads();
    if (ty == 0 && c < C) {
      for (int k = 1; k < kRowLanes; ++k) {
        sum_weight += shared_weight[k][tx];
        sum_bias += shared_bias[k][tx];
      }
      partial_weight[static_cast<std::size_t>(chunk) * C + c] = sum_weight;
      partial_bias[static_cast<std::size_t>(chunk) * C + c] = sum_bias;
    }
  }
}

__global__ void layernorm_backward_finish_kernel(float* dweight, float* dbias, const float* partial_weight,
                                                 const float* partial_bias, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum_weight = 0.0f, sum_bias = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    sum_weight += partial_weight[static_cast<std::size_t>(k) * C + c];
    sum_bias += partial_bias[static_cast<std::size_t>(k) * C + c];
  }
  dweight[c] += sum_weight;
  dbias[c] += sum_bias;
}

}  // namespace

void layernorm_forward(const Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  if (N == 0 || C == 0) return;
  layernorm_forward_kernel<<<ceil_div(N, kRowsPerBlock), kRowThreads, 0, ctx.stream>>>(out, mean, rstd, inp, weight,
                                                                                      bias, N, C);
  GT_CUDA_CHECK_LAUNCH();
}

void residual_layernorm_forward(const Context& ctx, float* residual, float* out, float* mean, float* rstd,
                                const float* a, const float* b, const float* weight, const float* bias, int N, int C) {
  if (N == 0 || C == 0) return;
  residual_layernorm_forward_kernel<<<ceil_div(N, kRowsPerBlock), kRowThreads, 0, ctx.stream>>>(residual, out, mean, rstd, a, b, weight, bias, N, C);
  GT_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(const Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd, int N, int C) {
  if (N == 0 || C == 0) return;
  layernorm_backward_input_kernel<<<ceil_div(N, kRowsPerBlock), kRowThreads, 0, ctx.stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  GT_CUDA_CHECK_LAUNCH();

  const int chunks = static_cast<int>(ceil_div(N, kRowsPerChunk));
  float* partial_weight = ctx.work->partials.get<float>(2 * static_cast<std::size_t>(chunks) * C, ctx.stream);
  float* partial_bias = partial_weight + static_cast<std::size_t>(chunks) * C;
  const dim3 block(kColumnTile, kRowLanes);
  const dim3 grid(ceil_div(C, kColumnTile), std::min(chunks, kMaxGridY));
  layernorm_backward_partials_kernel<<<grid, block, 0, ctx.stream>>>(partial_weight, partial_bias, dout, inp, mean,
                                                                     rstd, N, C, chunks);
  GT_CUDA_CHECK_LAUNCH();
  layernorm_backward_finish_kernel<<<ceil_div(C, 256), 256, 0, ctx.stream>>>(dweight, dbias, partial_weight,
                                                                             partial_bias, chunks, C);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
