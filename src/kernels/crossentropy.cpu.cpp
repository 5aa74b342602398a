// Softmax + cross-entropy, fused, CPU twin. Per row (token) of logits[N,V]:
//   forward:  loss = log(sum_j exp(x_j - max)) - (x_target - max)
//   backward: dlogits_j = (softmax(x)_j - [j == target]) * dloss   (overwrites)
// Subtracting the row maximum keeps every exp() in (0, 1]: no overflow for
// large logits, and the log-sum-exp is never log(0).
#include <cmath>
#include <cstddef>
#include <string>

#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"
#include "geotrain/common/errors.hpp"

namespace geotrain::kernels::cpu {
namespace {

// An out-of-range target would read outside the row; a corrupt token shard
// must stop the run with its position, not produce a silent wrong loss.
void check_targets(const int* targets, int N, int V) {
  for (int row = 0; row < N; ++row) {
    if (targets[row] < 0 || targets[row] >= V) {
      throw geotrain::RunError("crossentropy: target " + std::to_string(targets[row]) + " of row " +
                               std::to_string(row) + " is outside the vocabulary [0, " +
                               std::to_string(V) + ")");
    }
  }
}

struct RowStatistics {
  float max;
  double sum;  // sum of exp(x - max); double because V is up to ~50k terms
};

RowStatistics softmax_statistics(const float* x, int V) {
  float max = x[0];
  for (int j = 1; j < V; ++j) max = x[j] > max ? x[j] : max;
  double sum = 0.0;
  for (int j = 0; j < V; ++j) sum += std::exp(x[j] - max);
  return {max, sum};
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * V))
  for (int row = 0; row < N; ++row) {
    const float* x = logits + static_cast<std::ptrdiff_t>(row) * V;
    const RowStatistics s = softmax_statistics(x, V);
    losses[row] = static_cast<float>(std::log(s.sum) - static_cast<double>(x[targets[row]] - s.max));
  }
}

void crossentropy_backward(float* dlogits, const float* logits, const int* targets, float dloss, int N,
                           int V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * V))
  for (int row = 0; row < N; ++row) {
    const std::ptrdiff_t offset = static_cast<std::ptrdiff_t>(row) * V;
    const RowStatistics s = softmax_statistics(logits + offset, V);
    const float inverse_sum = static_cast<float>(1.0 / s.sum);
    for (int j = 0; j < V; ++j) {
      const float probability = std::exp(logits[offset + j] - s.max) * inverse_sum;
      dlogits[offset + j] = probability * dloss;
    }
    dlogits[offset + targets[row]] -= dloss;
  }
}

// ---- vocabulary-parallel passes: each rank sees V of the vocabulary's
// columns; the caller combines row_max (MAX) and stats (SUM) over the group.

void crossentropy_shard_max(float* row_max, const float* logits, int N, int V) {
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * V))
  for (int row = 0; row < N; ++row) {
    const float* x = logits + static_cast<std::ptrdiff_t>(row) * V;
    float max = x[0];
    for (int j = 1; j < V; ++j) max = x[j] > max ? x[j] : max;
    row_max[row] = max;
  }
}

void crossentropy_shard_statistics(float* stats, const float* logits, const int* targets, const float* row_max,
                                   int N, int V, int vocab_begin) {
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * V))
  for (int row = 0; row < N; ++row) {
    const float* x = logits + static_cast<std::ptrdiff_t>(row) * V;
    double sum = 0.0;
    for (int j = 0; j < V; ++j) sum += std::exp(x[j] - row_max[row]);
    const int local = targets[row] - vocab_begin;
    stats[2 * row] = static_cast<float>(sum);
    stats[2 * row + 1] = local >= 0 && local < V ? x[local] - row_max[row] : 0.0f;
  }
}

void crossentropy_shard_backward(float* dlogits, const float* logits, const int* targets, const float* row_max,
                                 const float* stats, float dloss, int N, int V, int vocab_begin) {
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(N) * V))
  for (int row = 0; row < N; ++row) {
    const std::ptrdiff_t offset = static_cast<std::ptrdiff_t>(row) * V;
    const float inverse_sum = 1.0f / stats[2 * row];
    for (int j = 0; j < V; ++j) {
      dlogits[offset + j] = std::exp(logits[offset + j] - row_max[row]) * inverse_sum * dloss;
    }
    const int local = targets[row] - vocab_begin;
    if (local >= 0 && local < V) dlogits[offset + local] -= dloss;
  }
}

}  // namespace geotrain::kernels::cpu
