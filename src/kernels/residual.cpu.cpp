// Residual connection and the elementwise helpers around it, CPU twin.
// The residual's backward needs no kernel: the gradient flows unchanged into
// both branches, which the model expresses with accumulate().
#include <algorithm>
#include <cstddef>
#include <vector>

#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"

namespace geotrain::kernels::cpu {

void residual_forward(float* out, const float* a, const float* b, std::size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void accumulate(float* y, const float* x, std::size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale(float* x, float factor, std::size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::size_t i = 0; i < n; ++i) x[i] *= factor;
}

namespace {

// Eight running sums in a fixed order: independent additions that the
// compiler puts in SIMD lanes (one running sum is a chain of dependent adds,
// 3x slower), with the same result on every run. Outside the OpenMP region,
// where GCC can see that `x` is a plain array and vectorises the loop.
double chunk_sum_of_squares(const float* x, std::size_t n) {
  constexpr std::size_t kLanes = 8;
  double lanes[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  for (double lane : lanes) sum += lane;
  return sum;
}

}  // namespace

// Summed in double over fixed-size chunks, the chunk sums then added in
// order: an OpenMP reduction clause would combine per-thread partials in
// arrival order, so the gradient norm (and with it clipping, and a resumed
// run) would change from run to run and with the thread count.
double sum_of_squares(const float* x, std::size_t n) {
  constexpr std::size_t kChunk = kMinParallelWork;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
    const std::size_t first = chunk * kChunk;
    partial[chunk] = chunk_sum_of_squares(x + first, std::min(n, first + kChunk) - first);
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace geotrain::kernels::cpu
