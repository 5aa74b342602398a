// Initial parameter values, GPT-2 style, reproducible per tensor name.
#pragma once
#include <cstdint>

#include "geotrain/model/gpt.hpp"

namespace geotrain::model {

// Matrices ~ N(0, 0.02), the two residual projections of each block scaled by
// 1/sqrt(2 * layers) (GPT-2), biases 0, layernorm weights 1. Each tensor is
// drawn from its own stream seeded by (seed, name), so a parameter gets the
// same values whichever stage holds it.
void fill_initial_values(const ParameterView& view, const ModelShape& config, std::uint64_t seed, float* out);

}  // namespace geotrain::model
