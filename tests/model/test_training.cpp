// Training the model on the shipped corpus must learn more than any model
// without context can: the validation loss has to fall below the
// cross-entropy of the best unigram model (byte frequencies of the training
// text, add-one smoothed), which an untrained model (~ln 256) cannot reach.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "geotrain/io/config.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/runtime/trainer.hpp"

namespace geotrain::runtime {
namespace {

double unigram_cross_entropy(const io::TokenDataset& data) {
  std::vector<double> counts(256, 1.0);  // add-one smoothing
  for (auto token : data.train_tokens()) counts[token] += 1;
  double total = 0;
  for (double c : counts) total += c;
  double loss = 0;
  for (auto token : data.validation_tokens()) loss -= std::log(counts[token] / total);
  return loss / data.validation_tokens().size();
}

TEST(Training, SmallModelBeatsTheUnigramBoundOnTheCorpus) {
  io::Config config = io::default_config();
  config.data.train = std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/data/corpus_train.bin";
  config.data.validation = std::string(GEOTRAIN_SOURCE_DIR) + "/inputs/data/corpus_val.bin";
  config.device.kind = DeviceRequest::cpu;
  config.train.steps = 150;
  config.train.micro_batch_sequences = 16;
  config.optimizer.warmup_steps = 10;
  config.train.eval_every_steps = 0;
  config.train.eval_batches = 16;
  config.train.quiet = true;
  const ModelShape model{.name = "small", .layers = 2, .hidden = 64, .heads = 4, .vocabulary = 256,
                               .sequence_length = 64};

  const io::TokenDataset data = io::TokenDataset::from_shards(config.data.train, config.data.validation, 256, 1);
  const double unigram = unigram_cross_entropy(data);
  std::ostringstream log;
  RunInputs inputs = prepare_run(config, model);
  const TrainResult result = train_single_rank(inputs, log);
  EXPECT_NEAR(result.initial_validation_loss, std::log(256.0), 0.1);  // untrained: uniform
  EXPECT_LT(result.final_validation_loss, unigram - 0.25)
      << "unigram bound " << unigram << ", initial " << result.initial_validation_loss;
  ASSERT_EQ(result.step_loss.size(), 150u);
  EXPECT_LT(result.step_loss.back(), result.step_loss.front() - 2.0);
}

TEST(Training, EtaFollowsThisRunsPaceAfterAResume) {
  // Resumed after step 10 of 30: 10 steps in 10 s, 10 left -> 10 s (not 10 s / 20 steps x 10).
  EXPECT_DOUBLE_EQ(remaining_seconds(10.0, 10, 19, 30), 10.0);
  EXPECT_DOUBLE_EQ(remaining_seconds(4.0, 0, 1, 5), 6.0);  // 2 steps in 4 s, 3 left
}

}  // namespace
}  // namespace geotrain::runtime
