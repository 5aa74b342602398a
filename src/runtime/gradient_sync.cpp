#include "geotrain/runtime/gradient_sync.hpp"

#include <cmath>
#include <vector>

namespace geotrain::runtime {

double synchronize_gradients(model::Stage& stage, kernels::Backend& backend, Collectives& collectives,
                             int pipeline_stages, int data_parallel) {
  const std::size_t count = stage.parameter_count();
  std::vector<float> host;
  if (data_parallel > 1) {
    host.resize(count);
    backend.download(host.data(), stage.grads(), count);
    collectives.sum_data_parallel(host.data(), count);
    backend.upload(stage.grads(), host.data(), count);
  }
  const model::ParameterView* wte = stage.find("wte");
  const bool split_embedding = pipeline_stages > 1 && wte != nullptr;
  if (split_embedding) {
    // The first stage holds the embedding's gradient, the last the head's:
    // the tied parameter's gradient is their sum, on both.
    std::vector<float> part(wte->count);
    backend.download(part.data(), stage.grads() + wte->offset, wte->count);
    collectives.sum_tied_embedding(part.data(), wte->count);
    backend.upload(stage.grads() + wte->offset, part.data(), wte->count);
  }
  double squares = backend.sum_of_squares(stage.grads(), count);
  if (split_embedding && stage.spec().has_head) {
    squares -= backend.sum_of_squares(stage.grads() + wte->offset, wte->count);  // counted on the first stage
  }
  return std::sqrt(collectives.sum_over_pipeline(squares));
}

}  // namespace geotrain::runtime
