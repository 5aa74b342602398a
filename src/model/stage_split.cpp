#include "geotrain/model/stage_split.hpp"

#include <numeric>

#include "geotrain/common/errors.hpp"

namespace geotrain::model {

std::vector<StageSpec> split_layers(int layers, int stages, const std::vector<int>& layers_per_stage) {
  if (stages < 1) throw InputError("pipeline stages must be >= 1, got " + std::to_string(stages));
  std::vector<int> counts = layers_per_stage;
  if (counts.empty()) {
    // An even split never leaves a stage without a layer: a rank that only
    // forwards activations is a configuration mistake, not a plan.
    if (stages > layers) {
      throw InputError(std::to_string(stages) + " stages but the model has only " + std::to_string(layers) +
                       " layers (each stage needs at least one: use fewer stages)");
    }
    for (int s = 0; s < stages; ++s) counts.push_back(layers / stages + (s < layers % stages ? 1 : 0));
  }
  if (static_cast<int>(counts.size()) != stages) {
    throw InputError(std::to_string(counts.size()) + " layer counts for " + std::to_string(stages) +
                     " pipeline stages");
  }
  for (int c : counts) {
    if (c < 0) throw InputError("a stage cannot hold " + std::to_string(c) + " layers");
  }
  const int total = std::accumulate(counts.begin(), counts.end(), 0);
  if (total != layers) {
    throw InputError("the stages hold " + std::to_string(total) + " layers but the model has " +
                     std::to_string(layers));
  }
  std::vector<StageSpec> specs;
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    specs.push_back({first, first + counts[s], s == 0, s == stages - 1});
    first += counts[s];
  }
  return specs;
}

}  // namespace geotrain::model
