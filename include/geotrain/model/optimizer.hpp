// AdamW (or plain SGD, for local steps' exactness checks) with decoupled weight decay, global gradient-norm clipping and a
// linear-warmup + cosine learning-rate schedule.
#pragma once
#include "geotrain/common/run_choices.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"

namespace geotrain::model {

struct OptimizerSettings {
  InnerOptimizer kind = InnerOptimizer::adamw;
  double learning_rate = 1e-3;
  double min_learning_rate_fraction = 0.1;  // cosine decays to this fraction
  int warmup_steps = 20;
  int total_steps = 300;
  double beta1 = 0.9, beta2 = 0.95, epsilon = 1e-8;
  double weight_decay = 0.1;   // matrices only (ParameterView::decays)
  double gradient_clip = 1.0;  // max global L2 norm; 0 disables
};

// Learning rate for 0-based `step`: linear warmup to learning_rate over
// warmup_steps, then cosine to min_learning_rate_fraction * learning_rate at
// total_steps (and constant after).
double learning_rate_at(const OptimizerSettings& settings, int step);

class AdamW {
 public:
  AdamW(kernels::Backend& backend, Stage& stage, const OptimizerSettings& settings);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;
  // Sum of squares of this stage's gradients (reduce across ranks before clipping).
  double gradient_sum_of_squares() const;
  // Clips by `global_norm` (already reduced), then one update with the
  // learning rate of `step` (0-based). Returns the learning rate used.
  double step(int step, double global_norm);
  float* first_moment() { return m_; }
  float* second_moment() { return v_; }

 private:
  void sgd_step(double lr);
  kernels::Backend& backend_;
  Stage& stage_;
  OptimizerSettings settings_;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

}  // namespace geotrain::model
