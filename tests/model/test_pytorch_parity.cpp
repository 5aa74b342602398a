// The whole model against an independent PyTorch implementation
// (tests/golden/make_model_golden.py): same weights, same tokens -> the same
// loss, the same gradient for every parameter, and the same parameters after
// one and two AdamW steps with gradient clipping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../kernels/golden_file.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/model/optimizer.hpp"

namespace geotrain::model {
namespace {

// fp32 forward/backward against a float64 reference: relative to the largest
// entry of each tensor, as rounding scales with magnitude.
constexpr double kGradientTolerance = 2e-5;

TEST(PyTorchParity, LossGradientsAndOneAdamWStep) {
  const auto golden = test::GoldenCase::load("gpt_small");
  // The shape of tests/golden/make_model_golden.py.
  const ModelShape config{.name = "parity", .layers = 2, .hidden = 16, .heads = 2, .vocabulary = 11,
                         .sequence_length = 6};
  const int B = 2, N = B * config.sequence_length;

  auto backend = kernels::make_cpu_backend();
  Stage stage(config, StageSpec::whole(config), *backend, B, 1);
  std::vector<float> params(stage.parameter_count());
  for (const ParameterView& view : stage.parameters()) {
    const auto& values = golden.floats("param." + view.name);
    ASSERT_EQ(values.size(), view.count) << view.name;
    std::copy(values.begin(), values.end(), params.begin() + view.offset);
  }
  backend->upload(stage.params(), params.data(), params.size());

  stage.zero_grads();
  const double loss = stage.forward(0, golden.ints("tokens").data(), nullptr, golden.ints("targets").data());
  EXPECT_NEAR(loss, golden.scalar("loss"), 1e-6 * golden.scalar("loss"));
  stage.backward(0, nullptr, 1.0f / N);

  // Every parameter's gradient against the golden tensors named prefix + name.
  auto expect_gradients = [&](const std::string& prefix) {
    std::vector<float> grads(stage.parameter_count());
    backend->download(grads.data(), stage.grads(), grads.size());
    for (const ParameterView& view : stage.parameters()) {
      const auto& expected = golden.floats(prefix + view.name);
      double largest = 0;
      for (float g : expected) largest = std::max(largest, std::abs(static_cast<double>(g)));
      for (std::size_t i = 0; i < view.count; ++i) {
        ASSERT_NEAR(grads[view.offset + i], expected[i], kGradientTolerance * largest + 1e-9)
            << prefix << view.name << "[" << i << "]";
      }
    }
  };
  expect_gradients("grad.");

  OptimizerSettings settings;
  settings.learning_rate = golden.scalar("lr");
  settings.warmup_steps = 0;  // the first step uses the full learning rate
  settings.total_steps = 1 << 30;  // constant learning rate over the two steps
  settings.beta1 = golden.scalar("beta1");
  settings.beta2 = golden.scalar("beta2");
  settings.epsilon = golden.scalar("epsilon");
  settings.weight_decay = golden.scalar("weight_decay");
  settings.gradient_clip = golden.scalar("clip");
  AdamW optimizer(*backend, stage, settings);
  const double norm = std::sqrt(optimizer.gradient_sum_of_squares());
  EXPECT_NEAR(norm, golden.scalar("grad_norm"), 1e-5 * golden.scalar("grad_norm"));
  optimizer.step(0, norm);
  backend->download(params.data(), stage.params(), params.size());
  for (const ParameterView& view : stage.parameters()) {
    const auto& expected = golden.floats("after_step." + view.name);
    const auto& gradient = golden.floats("grad." + view.name);
    for (std::size_t i = 0; i < view.count; ++i) {
      // Adam's first step moves each entry by about lr * sign(gradient): an
      // entry whose reference gradient is within rounding of zero may go
      // either way.
      const bool sign_is_noise = std::abs(gradient[i]) < 1e-6;
      const double tolerance = sign_is_noise ? 2.1 * settings.learning_rate : 2e-6;
      ASSERT_NEAR(params[view.offset + i], expected[i], tolerance) << view.name << "[" << i << "]";
    }
  }

  // Second step, second batch: exercises the moments and bias corrections.
  stage.zero_grads();
  const double loss2 = stage.forward(0, golden.ints("tokens2").data(), nullptr, golden.ints("targets2").data());
  EXPECT_NEAR(loss2, golden.scalar("loss2"), 1e-5 * golden.scalar("loss2"));
  stage.backward(0, nullptr, 1.0f / N);
  expect_gradients("grad2.");
  optimizer.step(1, std::sqrt(optimizer.gradient_sum_of_squares()));
  backend->download(params.data(), stage.params(), params.size());
  for (const ParameterView& view : stage.parameters()) {
    const auto& expected = golden.floats("after_step2." + view.name);
    const auto& gradient = golden.floats("grad." + view.name);
    for (std::size_t i = 0; i < view.count; ++i) {
      const double tolerance = std::abs(gradient[i]) < 1e-6 ? 2.1 * settings.learning_rate : 1e-5;
      ASSERT_NEAR(params[view.offset + i], expected[i], tolerance) << view.name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace geotrain::model
