// pipeline.flushless against an independent loop that applies PipeDream-2BW's
// rule by hand: step t's gradient is taken at the weights one update older
// than the newest (after t - 1 updates; the initial weights for steps 0 and
// 1) and the optimizer's step on it is applied to the newest weights. The loop keeps every version in host
// memory and shares nothing with the trainer but the stage, the optimizer and
// the data stream.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "geotrain/io/config.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/model/optimizer.hpp"
#include "geotrain/runtime/trainer.hpp"

namespace geotrain::runtime {
namespace {

constexpr int kSteps = 8, kMicroBatches = 2, kSequences = 2;

io::Config flushless_config() {
  io::Config config = io::default_config();
  config.data.train = std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/data/corpus_train.bin";
  config.data.validation = std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/data/corpus_val.bin";
  config.device.kind = DeviceRequest::cpu;
  config.train.steps = kSteps;
  config.train.micro_batch_sequences = kSequences;
  config.train.gradient_accumulation = kMicroBatches;
  config.optimizer.warmup_steps = 2;
  config.optimizer.gradient_clip = 0.5;  // binding at these norms: the clip is part of the rule
  config.train.eval_every_steps = 0;
  config.train.eval_batches = 2;
  config.train.quiet = true;
  config.pipeline.flushless = true;
  return config;
}

const ModelShape kModel{.name = "flushless", .layers = 2, .hidden = 32, .heads = 2, .vocabulary = 256,
                        .sequence_length = 16};

TEST(Flushless, SingleStageFollowsTheDelayedRuleByHand) {
  const io::Config config = flushless_config();
  std::ostringstream log;
  RunInputs inputs = prepare_run(config, kModel);
  const TrainResult result = train_single_rank(inputs, log);
  ASSERT_EQ(result.step_loss.size(), static_cast<std::size_t>(kSteps));

  const auto backend = kernels::make_backend(DeviceRequest::cpu);
  model::Stage stage(kModel, model::StageSpec::whole(kModel), *backend, kSequences, 1);
  stage.initialize(config.train.seed);
  model::OptimizerSettings settings;
  settings.learning_rate = config.optimizer.learning_rate;
  settings.min_learning_rate_fraction = config.optimizer.min_learning_rate_fraction;
  settings.warmup_steps = config.optimizer.warmup_steps;
  settings.total_steps = config.train.steps;
  settings.beta1 = config.optimizer.beta1;
  settings.beta2 = config.optimizer.beta2;
  settings.epsilon = config.optimizer.epsilon;
  settings.weight_decay = config.optimizer.weight_decay;
  settings.gradient_clip = config.optimizer.gradient_clip;
  model::AdamW optimizer(*backend, stage, settings);
  io::TokenDataset data = io::TokenDataset::from_shards(config.data.train, config.data.validation, 256, config.train.seed);
  data.set_replica(0, 1);

  const std::size_t count = stage.parameter_count();
  std::vector<std::vector<float>> versions(1, std::vector<float>(count));  // versions[k]: after k updates
  backend->download(versions[0].data(), stage.params(), count);
  const double scale = 1.0 / (static_cast<double>(kSequences) * kModel.sequence_length * kMicroBatches);
  std::vector<int> tokens, targets;
  for (int t = 0; t < kSteps; ++t) {
    backend->upload(stage.params(), versions[static_cast<std::size_t>(std::max(0, t - 1))].data(), count);
    stage.zero_grads();
    double loss = 0;
    for (int i = 0; i < kMicroBatches; ++i) {
      data.next_batch(kSequences, kModel.sequence_length, tokens, targets);
      loss += stage.forward(0, tokens.data(), nullptr, targets.data());
      stage.backward(0, nullptr, static_cast<float>(scale));
    }
    const double norm = std::sqrt(model::gradient_squares(stage, *backend, stage.grads(), nullptr));
    backend->upload(stage.params(), versions.back().data(), count);  // the newest weights take the step
    optimizer.step(t, norm);
    versions.emplace_back(count);
    backend->download(versions.back().data(), stage.params(), count);
    EXPECT_NEAR(result.step_loss[static_cast<std::size_t>(t)], loss / kMicroBatches, 1e-6)
        << "step " << t + 1 << " (synchronous training would read version " << t << ", this rule version "
        << std::max(0, t - 1) << ")";
  }
}

}  // namespace
}  // namespace geotrain::runtime
