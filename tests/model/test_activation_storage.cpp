// bf16 activation storage (device.activation_storage = bf16) against fp32
// storage on the same stage: the forward is the same computation (losses
// and outputs bitwise equal), the backward reads activations rounded to bf16
// (gradients within bf16's rounding of fp32 storage's, and not equal to
// them: the rounding happens). Reference: fp32 storage, which the golden and
// PyTorch parity tests hold to PyTorch.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"

namespace geotrain::model {
namespace {

const ModelShape kModel{.name = "storage", .layers = 3, .hidden = 48, .heads = 4, .vocabulary = 71,
                        .sequence_length = 24};
constexpr int kMicroBatch = 2, kSlots = 3;

struct Result {
  std::vector<double> losses;
  std::vector<std::vector<float>> outputs;  // the last layer's, per slot
  std::vector<float> gradients;
};

// kSlots micro-batches forward, then backward in reverse order (GPipe's order).
Result run(ActivationStorage storage) {
  auto backend = kernels::make_cpu_backend();
  Stage stage(kModel, StageSpec::whole(kModel), *backend, kMicroBatch, kSlots, nullptr, storage);
  EXPECT_EQ(stage.activation_storage(), storage);
  stage.initialize(11);
  stage.zero_grads();
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> token(0, kModel.vocabulary - 1);
  const std::size_t N = static_cast<std::size_t>(kMicroBatch) * kModel.sequence_length;
  Result result;
  for (int slot = 0; slot < kSlots; ++slot) {
    std::vector<int> tokens(N), targets(N);
    for (std::size_t i = 0; i < N; ++i) tokens[i] = token(rng), targets[i] = token(rng);
    result.losses.push_back(stage.forward(slot, tokens.data(), nullptr, targets.data()));
    std::vector<float> out(N * kModel.hidden);
    backend->download(out.data(), stage.output(slot), out.size());
    result.outputs.push_back(out);
  }
  for (int slot = kSlots - 1; slot >= 0; --slot) stage.backward(slot, nullptr, 1.0f / (kSlots * N));
  result.gradients.resize(stage.parameter_count());
  backend->download(result.gradients.data(), stage.grads(), result.gradients.size());
  return result;
}

TEST(ActivationStorage, Bf16KeepsTheForwardAndRoundsWhatTheBackwardReads) {
  const Result fp32 = run(ActivationStorage::fp32), bf16 = run(ActivationStorage::bf16);
  EXPECT_EQ(bf16.losses, fp32.losses) << "the forward computes in fp32 with either storage";
  EXPECT_EQ(bf16.outputs, fp32.outputs);
  double difference = 0, reference = 0;
  for (std::size_t i = 0; i < fp32.gradients.size(); ++i) {
    ASSERT_TRUE(std::isfinite(bf16.gradients[i])) << i;
    difference += std::pow(static_cast<double>(bf16.gradients[i]) - fp32.gradients[i], 2);
    reference += std::pow(static_cast<double>(fp32.gradients[i]), 2);
  }
  const double relative = std::sqrt(difference / reference);
  // bf16 keeps 8 significant bits: each stored value is off by at most 2^-9
  // (2e-3) relative, and a gradient built from many of them by about that
  // much on average. 1e-2 leaves 5x for the few products of two rounded
  // values; a lost or misplaced tensor moves the gradient by O(1).
  EXPECT_LT(relative, 1e-2);
  EXPECT_GT(relative, 1e-5) << "bf16 storage gave fp32's gradient: nothing was rounded";
  std::printf("bf16 activation storage: gradient relative to fp32 storage's %.3e\n", relative);
  EXPECT_EQ(run(ActivationStorage::bf16).gradients, bf16.gradients) << "bf16 storage must stay bitwise reproducible";
}

}  // namespace
}  // namespace geotrain::model
