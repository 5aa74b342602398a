#include "geotrain/model/tensor_parallel.hpp"

#include <algorithm>

#include "geotrain/common/errors.hpp"

namespace geotrain::model {

VocabularyRange vocabulary_range(int vocabulary, int tensor_parallel, int tensor_rank) {
  const auto edge = [&](int r) {
    return static_cast<int>(static_cast<long long>(vocabulary) * r / tensor_parallel);
  };
  return {edge(tensor_rank), edge(tensor_rank + 1) - edge(tensor_rank)};
}

namespace {

// Calls copy(whole_offset, part_offset, floats) for every contiguous run of
// the slice.
template <typename Copy>
void for_each_run(const TensorSlice& slice, const std::vector<int>& shape, Copy copy) {
  if (shape.empty() || shape.size() > 2) throw InputError("tensor slice: only 1-D and 2-D tensors");
  const std::size_t rows = static_cast<std::size_t>(shape[0]);
  const std::size_t columns = shape.size() == 2 ? static_cast<std::size_t>(shape[1]) : 1;
  if (!slice.split()) {
    copy(0, 0, rows * columns);
    return;
  }
  const std::size_t extent = static_cast<std::size_t>(shape[static_cast<std::size_t>(slice.dim)]);
  const std::size_t block = extent / static_cast<std::size_t>(slice.blocks);
  const auto begin = static_cast<std::size_t>(slice.begin), take = static_cast<std::size_t>(slice.extent);
  if (block * slice.blocks != extent || begin + take > block) {
    throw InputError("tensor slice: outside the tensor");
  }
  if (slice.dim == 0) {  // whole rows of each block
    for (int b = 0; b < slice.blocks; ++b) {
      copy((b * block + begin) * columns, b * take * columns, take * columns);
    }
  } else {  // part of every row
    for (std::size_t row = 0; row < rows; ++row) {
      for (int b = 0; b < slice.blocks; ++b) {
        copy(row * columns + b * block + begin, row * slice.blocks * take + b * take, take);
      }
    }
  }
}

}  // namespace

void copy_slice_out(const TensorSlice& slice, const std::vector<int>& whole_shape, const float* whole, float* part) {
  for_each_run(slice, whole_shape, [&](std::size_t at_whole, std::size_t at_part, std::size_t n) {
    std::copy_n(whole + at_whole, n, part + at_part);
  });
}

void copy_slice_in(const TensorSlice& slice, const std::vector<int>& whole_shape, const float* part, float* whole) {
  for_each_run(slice, whole_shape, [&](std::size_t at_whole, std::size_t at_part, std::size_t n) {
    std::copy_n(part + at_part, n, whole + at_whole);
  });
}

}  // namespace geotrain::model
