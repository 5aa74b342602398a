// Token + position embedding, CPU twin.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
//   backward: dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]
#include <cstddef>

#include "cpu_ops.hpp"
#include "cpu_parallel.hpp"

namespace geotrain::kernels::cpu {

void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                       int C) {
  const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(B) * T;
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(rows) * C))
  for (std::ptrdiff_t row = 0; row < rows; ++row) {
    const float* token_row = wte + static_cast<std::ptrdiff_t>(tokens[row]) * C;
    const float* position_row = wpe + (row % T) * C;
    float* out_row = out + row * C;
    for (int c = 0; c < C; ++c) out_row[c] = token_row[c] + position_row[c];
  }
}

// A token that occurs several times in the batch adds into the same dwte row,
// so the loop is split over channels, not tokens: every thread owns a block
// of columns of both tables and walks all positions in order.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                        int C) {
  const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(B) * T;
  for_each_column_block(C, static_cast<std::size_t>(rows), [&](int first, int last) {
    for (std::ptrdiff_t row = 0; row < rows; ++row) {
      const float* dout_row = dout + row * C;
      float* dwte_row = dwte + static_cast<std::ptrdiff_t>(tokens[row]) * C;
      float* dwpe_row = dwpe + (row % T) * C;
      for (int c = first; c < last; ++c) {
        dwte_row[c] += dout_row[c];
        dwpe_row[c] += dout_row[c];
      }
    }
  });
}

// Vocabulary-parallel: a token outside this rank's rows contributes zero here
// (another rank of the group holds its row); the sum over the group is the
// whole embedding.
void embedding_shard_forward(float* out, const int* tokens, const float* wte_rows, const float* wpe, int B, int T,
                             int C, int vocab_begin, int vocab_rows) {
  const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(B) * T;
#pragma omp parallel for schedule(static) if (worth_parallel(static_cast<std::size_t>(rows) * C))
  for (std::ptrdiff_t row = 0; row < rows; ++row) {
    const int local = tokens[row] - vocab_begin;
    const float* token_row = local >= 0 && local < vocab_rows ? wte_rows + static_cast<std::ptrdiff_t>(local) * C
                                                              : nullptr;
    const float* position_row = wpe != nullptr ? wpe + (row % T) * C : nullptr;
    float* out_row = out + row * C;
    for (int c = 0; c < C; ++c) {
      out_row[c] = (token_row != nullptr ? token_row[c] : 0.0f) + (position_row != nullptr ? position_row[c] : 0.0f);
    }
  }
}

void embedding_shard_backward(float* dwte_rows, float* dwpe, const float* dout, const int* tokens, int B, int T,
                              int C, int vocab_begin, int vocab_rows) {
  const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(B) * T;
  for_each_column_block(C, static_cast<std::size_t>(rows), [&](int first, int last) {
    for (std::ptrdiff_t row = 0; row < rows; ++row) {
      const float* dout_row = dout + row * C;
      const int local = tokens[row] - vocab_begin;
      if (local >= 0 && local < vocab_rows) {
        float* dwte_row = dwte_rows + static_cast<std::ptrdiff_t>(local) * C;
        for (int c = first; c < last; ++c) dwte_row[c] += dout_row[c];
      }
      if (dwpe != nullptr) {
        float* dwpe_row = dwpe + (row % T) * C;
        for (int c = first; c < last; ++c) dwpe_row[c] += dout_row[c];
      }
    }
  });
}

}  // namespace geotrain::kernels::cpu
