// How the model's layers are cut into pipeline stages.
#pragma once
#include <string>
#include <vector>

#include "geotrain/model/gpt.hpp"

namespace geotrain::model {

// Stage s holds layers_per_stage[s] consecutive layers (the embedding on
// stage 0, the head on the last). Empty `layers_per_stage`: an even split,
// the first (layers mod stages) stages one layer more. Throws
// InputError with the reason when the counts do not add up to
// the model's layers, a count is negative, or their number is not `stages`.
std::vector<StageSpec> split_layers(int layers, int stages, const std::vector<int>& layers_per_stage = {});

}  // namespace geotrain::model
