#include "geotrain/runtime/gradient_sync.hpp"

#include <cmath>
#include <vector>

namespace geotrain::runtime {

namespace {

// Sums `count` floats of device memory at `data` with `sum`, through host
// memory unless the collectives take device memory.
template <typename Sum>
void sum_buffer(kernels::Backend& backend, Collectives& collectives, float* data, std::size_t count, Sum sum) {
  if (collectives.takes_device_memory()) {
    sum(data, count);
    return;
  }
  std::vector<float> host(count);
  backend.download(host.data(), data, count);
  sum(host.data(), count);
  backend.upload(data, host.data(), count);
}

}  // namespace

double synchronize_gradients(model::Stage& stage, kernels::Backend& backend, Collectives& collectives,
                             int pipeline_stages, int data_parallel, double* pipeline_sum) {
  const std::size_t count = stage.parameter_count();
  if (data_parallel > 1) {
    sum_buffer(backend, collectives, stage.grads(), count,
               [&](float* d, std::size_t n) { collectives.sum_data_parallel(d, n); });
  }
  const model::ParameterView* wte = stage.find("wte");
  const bool split_embedding = pipeline_stages > 1 && wte != nullptr;
  if (split_embedding) {
    // The first stage holds the embedding's gradient, the last the head's:
    // the tied parameter's gradient is their sum, on both.
    sum_buffer(backend, collectives, stage.grads() + wte->offset, wte->count,
               [&](float* d, std::size_t n) { collectives.sum_tied_embedding(d, n); });
  }
  double squares = backend.sum_of_squares(stage.grads(), count);
  if (split_embedding && stage.spec().has_head) {
    squares -= backend.sum_of_squares(stage.grads() + wte->offset, wte->count);  // counted on the first stage
  }
  double sums[2] = {squares, pipeline_sum ? *pipeline_sum : 0.0};
  collectives.sum_over_pipeline_values(sums, pipeline_sum ? 2 : 1);
  if (pipeline_sum) *pipeline_sum = sums[1];
  return std::sqrt(sums[0]);
}

}  // namespace geotrain::runtime
