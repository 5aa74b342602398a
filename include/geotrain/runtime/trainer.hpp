// Training on one rank: the whole model as one stage, gradient accumulation
// over micro-batches, AdamW, periodic validation, a progress line per step.
#pragma once
#include <iosfwd>
#include <vector>

#include "geotrain/io/config.hpp"
#include "geotrain/model/gpt.hpp"

namespace geotrain::runtime {

struct TrainResult {
  std::vector<double> step_loss;      // mean training loss of each step
  double initial_validation_loss = 0;
  double final_validation_loss = 0;
  double tokens_per_second = 0;       // over all steps after the first
  double model_flops_per_token = 0;
};

// FLOPs of one token's forward + backward: 6 per parameter plus attention's
// 12 * layers * hidden * sequence (the usual estimate; no recomputation).
double flops_per_token(const model::GptConfig& config, double parameters);

TrainResult train_single_rank(const io::Config& config, const model::GptConfig& model, std::ostream& log);

}  // namespace geotrain::runtime
