// Megatron-style tensor parallelism inside a stage: t ranks (one node) each
// hold 1/t of every layer and of the vocabulary, and sum partial results
// through a TensorGroup.
//   attention: heads split (qkv column-parallel, its output projection row-parallel);
//   MLP: fc column-parallel, its projection row-parallel;
//   wte / LM head: rows of the vocabulary (vocabulary-parallel embedding and
//   cross-entropy).
// LayerNorms, the residual stream, wpe and the row-parallel biases are
// replicated: every rank computes them from the same summed inputs.
#pragma once
#include <cstddef>
#include <vector>

namespace geotrain::model {

// The ranks of one tensor-parallel group as a stage sees them. The sums are
// in place on backend (device) memory and give every member the same bits.
class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void sum(float* data, std::size_t count) = 0;
  virtual void max(float* data, std::size_t count) = 0;
  virtual void sum_values(double* values, int count) = 0;  // host doubles
  virtual void sum_host(float* data, std::size_t count) = 0;  // host floats (checkpoints)
};

// Rows [begin, begin + rows) of a vocabulary of V split over t ranks
// (uneven when t does not divide V: the first ranks get one row less).
struct VocabularyRange {
  int begin = 0, rows = 0;
};
VocabularyRange vocabulary_range(int vocabulary, int tensor_parallel, int tensor_rank);

// How a rank's tensor sits in the whole one: along `dim` the whole extent is
// `blocks` equal blocks (qkv's q, k, v: 3) and the rank holds
// [begin, begin + extent) of each. dim < 0: the whole tensor (replicated).
struct TensorSlice {
  int dim = -1;
  int blocks = 1;
  int begin = 0, extent = 0;
  bool split() const { return dim >= 0; }
};

// The rank's part of `whole` (shape `whole_shape`, 1-D or 2-D) into `part`,
// and back.
void copy_slice_out(const TensorSlice& slice, const std::vector<int>& whole_shape, const float* whole, float* part);
void copy_slice_in(const TensorSlice& slice, const std::vector<int>& whole_shape, const float* part, float* whole);

}  // namespace geotrain::model
