#include "geotrain/model/optimizer.hpp"

#include <algorithm>
#include <cmath>

namespace geotrain::model {

double learning_rate_at(const OptimizerSettings& s, int step) {
  if (s.warmup_steps > 0 && step < s.warmup_steps) return s.learning_rate * (step + 1) / s.warmup_steps;
  const int decay_steps = std::max(1, s.total_steps - s.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - s.warmup_steps) / decay_steps);
  const double floor = s.min_learning_rate_fraction * s.learning_rate;
  return floor + 0.5 * (s.learning_rate - floor) * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(kernels::Backend& backend, Stage& stage, const OptimizerSettings& settings)
    : backend_(backend), stage_(stage), settings_(settings) {
  m_ = backend_.alloc(stage_.parameter_count());
  v_ = backend_.alloc(stage_.parameter_count());
}

AdamW::~AdamW() {
  backend_.release(m_);
  backend_.release(v_);
}

double AdamW::gradient_sum_of_squares() const {
  return backend_.sum_of_squares(stage_.grads(), stage_.parameter_count());
}

double AdamW::step(int step, double global_norm) {
  if (settings_.gradient_clip > 0 && global_norm > settings_.gradient_clip) {
    backend_.scale(stage_.grads(), static_cast<float>(settings_.gradient_clip / global_norm), stage_.parameter_count());
  }
  const double lr = learning_rate_at(settings_, step);
  if (settings_.kind == InnerOptimizer::sgd) {
    sgd_step(lr);
    return lr;
  }
  for (const ParameterView& view : stage_.parameters()) {
    backend_.adamw_update(stage_.params() + view.offset, stage_.grads() + view.offset, m_ + view.offset,
                          v_ + view.offset, view.count, static_cast<float>(lr), static_cast<float>(settings_.beta1),
                          static_cast<float>(settings_.beta2), static_cast<float>(settings_.epsilon),
                          view.decays ? static_cast<float>(settings_.weight_decay) : 0.0f, step + 1);
  }
  return lr;
}

// p <- p (1 - lr wd) - lr g, from the backend's scale and accumulate (the
// gradient is consumed: the next step zeroes it anyway).
void AdamW::sgd_step(double lr) {
  for (const ParameterView& view : stage_.parameters()) {
    float* p = stage_.params() + view.offset;
    float* g = stage_.grads() + view.offset;
    if (view.decays && settings_.weight_decay > 0) {
      backend_.scale(p, static_cast<float>(1.0 - lr * settings_.weight_decay), view.count);
    }
    backend_.scale(g, static_cast<float>(-lr), view.count);
    backend_.accumulate(p, g, view.count);
  }
}

}  // namespace geotrain::model
