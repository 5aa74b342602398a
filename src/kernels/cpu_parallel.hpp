// Internal: the two OpenMP loop shapes the CPU twins share.
#pragma once
#include <algorithm>
#include <cstddef>

namespace geotrain::kernels::cpu {

// Below this much work (elements touched) a loop runs on the calling thread:
// waking the OpenMP team costs a few microseconds, more than it saves on
// small tensors (biases, the per-view AdamW calls on layernorm weights).
inline constexpr std::size_t kMinParallelWork = std::size_t{1} << 15;

inline bool worth_parallel(std::size_t work) { return work >= kMinParallelWork; }

// Columns per block for column sums: 64 floats = 256 bytes, four cache lines
// per row visited.
inline constexpr int kColumnBlock = 64;

// Calls body(first, last) for the column blocks [first, last) of [0, columns),
// in parallel. Gradients that sum over rows (layernorm weight and bias, the
// embedding tables) use it: each column is owned by one thread, so no atomics or
// per-thread copies are needed, and every column is summed in row order - the
// result does not depend on the thread count.
template <class Body>
void for_each_column_block(int columns, std::size_t rows, Body&& body) {
  const int blocks = (columns + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (worth_parallel(rows * static_cast<std::size_t>(columns)))
  for (int block = 0; block < blocks; ++block) {
    const int first = block * kColumnBlock;
    body(first, std::min(columns, first + kColumnBlock));
  }
}

}  // namespace geotrain::kernels::cpu
