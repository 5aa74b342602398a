// Token + position embedding, forward and backward.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
//   backward: dwpe[t,:] += sum_b dout[b,t,:];  dwte[v,:] += sum_{(b,t): token = v} dout[b,t,:]
// The backward is deterministic without atomics: dwpe sums over b in order;
// for dwte the positions are sorted by token with a stable radix sort, and
// one block per distinct token adds its positions' gradients in position
// order, starting from the old value (the same order as a sequential loop
// over positions).
// The vocabulary-parallel pair (embedding_shard_*) is the same with this
// rank's rows [vocab_begin, vocab_begin + vocab_rows) of wte: a token outside
// them embeds as 0 and its run of sorted positions is skipped; wpe / dwpe may
// be null (one rank of the group adds the positions).
#include <climits>
#include <cub/device/device_radix_sort.cuh>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"

namespace geotrain::kernels::cuda {
namespace {

__global__ void embedding_forward_kernel(float* out, const int* tokens, const float* wte, const float* wpe, int T,
                                         int C, std::size_t total) {
  for (std::size_t i = global_index(); i < total; i += global_stride()) {
    const std::size_t row = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(row % T);
    out[i] = wte[static_cast<std::size_t>(tokens[row]) * C + c] + wpe[static_cast<std::size_t>(t) * C + c];
  }
}

__global__ void embedding_shard_forward_kernel(float* out, const int* tokens, const float* wte_rows,
                                               const float* wpe, int T, int C, int vocab_begin, int vocab_rows,
                                               std::size_t total) {
  for (std::size_t i = global_index(); i < total; i += global_stride()) {
    const std::size_t row = i / C;
    const int c = static_cast<int>(i % C);
    // In 64 bits: tokens[row] - vocab_begin may not fit an int.
    const long long local = static_cast<long long>(tokens[row]) - vocab_begin;
    float value = local >= 0 && local < vocab_rows ? wte_rows[static_cast<std::size_t>(local) * C + c] : 0.0f;
    if (wpe != nullptr) value += wpe[(row % T) * C + c];
    out[i] = value;
  }
}

// One thread per (t, c): dwpe[t,c] += dout[0,t,c] + dout[1,t,c] + ... in b order.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const std::size_t TC = static_cast<std::size_t>(T) * C;
  for (std::size_t i = global_index(); i < TC; i += global_stride()) {
    float sum = dwpe[i];
    for (int b = 0; b < B; ++b) sum += dout[b * TC + i];
    dwpe[i] = sum;
  }
}

__global__ void iota_kernel(int* values, int n) {
  for (std::size_t i = global_index(); i < static_cast<std::size_t>(n); i += global_stride()) {
    values[i] = static_cast<int>(i);
  }
}

// One block per sorted position; only the first position of each run of
// equal tokens does work: it adds the run's gradients in position order into
// row token - vocab_begin, for the tokens in [vocab_begin, vocab_begin + vocab_rows).
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int* sorted_tokens,
                                              const int* sorted_positions, int N, int C, int vocab_begin,
                                              int vocab_rows) {
  const int first = blockIdx.x;
  const int token = sorted_tokens[first];
  if (first > 0 && sorted_tokens[first - 1] == token) return;
  const long long local = static_cast<long long>(token) - vocab_begin;
  if (local < 0 || local >= vocab_rows) return;  // another rank's row
  int end = first + 1;
  while (end < N && sorted_tokens[end] == token) ++end;
  float* row = dwte + static_cast<std::size_t>(local) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = row[c];
    for (int j = first; j < end; ++j) sum += dout[static_cast<std::size_t>(sorted_positions[j]) * C + c];
    row[c] = sum;
  }
}

std::size_t align_up(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

void embedding_backward_wpe(const Context& ctx, float* dwpe, const float* dout, int B, int T, int C) {
  const std::size_t TC = static_cast<std::size_t>(T) * C;
  embedding_backward_wpe_kernel<<<elementwise_blocks(TC), kElementwiseThreads, 0, ctx.stream>>>(dwpe, dout, B, T, C);
  GT_CUDA_CHECK_LAUNCH();
}

// dwte[token - vocab_begin, :] += the gradients of the positions holding
// token, for the tokens in [vocab_begin, vocab_begin + vocab_rows); N > 0, C > 0.
void embedding_backward_wte(const Context& ctx, float* dwte, const float* dout, const int* tokens, int N, int C,
                            int vocab_begin, int vocab_rows) {
  // Sort (token, position) pairs by token; radix sort is stable, so equal
  // tokens keep increasing positions.
  std::size_t sort_bytes = 0;
  GT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int*>(nullptr),
                                                      static_cast<int*>(nullptr), static_cast<const int*>(nullptr),
                                                      static_cast<int*>(nullptr), N, 0, 32, ctx.stream));
  const std::size_t ints = align_up(static_cast<std::size_t>(N) * sizeof(int));
  char* base = static_cast<char*>(ctx.work->sort.bytes(align_up(sort_bytes) + 3 * ints, ctx.stream));
  void* sort_temp = base;
  int* positions = reinterpret_cast<int*>(base + align_up(sort_bytes));
  int* sorted_positions = reinterpret_cast<int*>(base + align_up(sort_bytes) + ints);
  int* sorted_tokens = reinterpret_cast<int*>(base + align_up(sort_bytes) + 2 * ints);

  iota_kernel<<<elementwise_blocks(N), kElementwiseThreads, 0, ctx.stream>>>(positions, N);
  GT_CUDA_CHECK_LAUNCH();
  GT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, tokens, sorted_tokens, positions,
                                                      sorted_positions, N, 0, 32, ctx.stream));
  const int threads = std::min(256, (C + kWarpSize - 1) / kWarpSize * kWarpSize);
  embedding_backward_wte_kernel<<<N, threads, 0, ctx.stream>>>(dwte, dout, sorted_tokens, sorted_positions, N, C,
                                                               vocab_begin, vocab_rows);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(const Context& ctx, float* out, const int* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  const std::size_t total = static_cast<std::size_t>(B) * T * C;
  if (total == 0) return;
  embedding_forward_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, ctx.stream>>>(out, tokens, wte, wpe,
                                                                                              T, C, total);
  GT_CUDA_CHECK_LAUNCH();
}

void embedding_backward(const Context& ctx, float* dwte, float* dwpe, const float* dout, const int* tokens, int B,
                        int T, int C) {
  const int N = B * T;
  if (N == 0 || C == 0) return;
  embedding_backward_wpe(ctx, dwpe, dout, B, T, C);
  embedding_backward_wte(ctx, dwte, dout, tokens, N, C, 0, INT_MAX);
}

void embedding_shard_forward(const Context& ctx, float* out, const int* tokens, const float* wte_rows,
                             const float* wpe, int B, int T, int C, int vocab_begin, int vocab_rows) {
  const std::size_t total = static_cast<std::size_t>(B) * T * C;
  if (total == 0) return;
  embedding_shard_forward_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, ctx.stream>>>(
      out, tokens, wte_rows, wpe, T, C, vocab_begin, vocab_rows, total);
  GT_CUDA_CHECK_LAUNCH();
}

void embedding_shard_backward(const Context& ctx, float* dwte_rows, float* dwpe, const float* dout,
                              const int* tokens, int B, int T, int C, int vocab_begin, int vocab_rows) {
  const int N = B * T;
  if (N == 0 || C == 0) return;
  if (dwpe != nullptr) embedding_backward_wpe(ctx, dwpe, dout, B, T, C);
  if (vocab_rows > 0) embedding_backward_wte(ctx, dwte_rows, dout, tokens, N, C, vocab_begin, vocab_rows);
}

}  // namespace geotrain::kernels::cuda
