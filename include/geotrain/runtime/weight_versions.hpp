// PipeDream-2BW's two versions of one stage's weights and its two gradient
// buffers (the flushless pipeline, pipeline.flushless). Step t reads
// version t mod 2. The update after step t runs while step t + 1 still
// reads the other version: it writes version t mod 2 as the newest weights
// minus the optimizer's step on step t's gradient, and step t + 2 reads it.
// So every step's gradient is computed on the weights one update older than
// the newest, whatever the stage and whenever its update runs.
#pragma once

#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"

namespace geotrain::runtime {

class WeightVersions {
 public:
  // Both versions start as the stage's weights now.
  WeightVersions(model::Stage& stage, kernels::Backend& backend);
  ~WeightVersions();
  WeightVersions(const WeightVersions&) = delete;
  WeightVersions& operator=(const WeightVersions&) = delete;

  // The stage reads the weights of step `step`.
  void read_for(int step);
  // The step's gradient is complete: kept aside for its update, while the
  // stage accumulates the next step's into a zeroed buffer.
  void set_gradient_aside();
  // Between these two the stage holds, for the update of step `step`,
  // version step mod 2 set to the newest weights, and that step's gradient;
  // the optimizer then updates the stage in place.
  void begin_update(int step);
  void end_update();

 private:
  model::Stage& stage_;
  kernels::Backend& backend_;
  float* other_weights_ = nullptr;   // the version the stage does not hold
  float* other_gradient_ = nullptr;  // the buffer the stage does not accumulate into
  int held_ = 0;                     // the version (0 or 1) the stage holds
};

}  // namespace geotrain::runtime
