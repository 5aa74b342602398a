#include "geotrain/runtime/weight_versions.hpp"

namespace geotrain::runtime {

namespace {

// Device to device through the backend's own kernels: 0 + x is x, bit for bit.
void copy_on_device(kernels::Backend& backend, float* to, const float* from, std::size_t count) {
  backend.fill_zero(to, count);
  backend.accumulate(to, from, count);
}

}  // namespace

WeightVersions::WeightVersions(model::Stage& stage, kernels::Backend& backend) : stage_(stage), backend_(backend) {
  const std::size_t count = stage.parameter_count();
  other_weights_ = backend_.alloc(count);
  other_gradient_ = backend_.alloc(count);
  copy_on_device(backend_, other_weights_, stage.params(), count);
}

WeightVersions::~WeightVersions() {
  backend_.release(other_weights_);
  backend_.release(other_gradient_);
}

void WeightVersions::read_for(int step) {
  if (step % 2 == held_) return;
  stage_.swap_parameters(other_weights_);
  held_ ^= 1;
}

void WeightVersions::set_gradient_aside() {
  stage_.swap_gradients(other_gradient_);
  stage_.zero_grads();
}

void WeightVersions::begin_update(int step) {
  read_for(step);
  // The other version is the newest: step - 1's update wrote it.
  copy_on_device(backend_, stage_.params(), other_weights_, stage_.parameter_count());
  stage_.swap_gradients(other_gradient_);
}

void WeightVersions::end_update() { stage_.swap_gradients(other_gradient_); }

}  // namespace geotrain::runtime
