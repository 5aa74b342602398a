// Sampling: the token picker's rules (greedy, temperature, top-k, the
// vocabulary limit, seeds) checked against hand-computed distributions, and
// generation from a checkpoint in a short window against the full-context
// stage. tests/e2e/check_sample_eval.py checks the texts against PyTorch
// and across pipeline layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/tokenizer.hpp"
#include "geotrain/runtime/checkpointing.hpp"
#include "geotrain/runtime/sampler.hpp"

namespace geotrain::runtime {
namespace {

SamplingSettings settings(double temperature, int top_k = 0, std::uint64_t seed = 1, int limit = 0) {
  SamplingSettings s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.seed = seed;
  s.token_limit = limit;
  return s;
}

std::vector<int> draws(const std::vector<float>& logits, const SamplingSettings& s, int count) {
  TokenPicker picker(s);
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(picker.pick(logits));
  return out;
}

std::vector<double> frequencies(const std::vector<int>& ids, int V) {
  std::vector<double> f(static_cast<std::size_t>(V), 0.0);
  for (int id : ids) f[id] += 1.0 / static_cast<double>(ids.size());
  return f;
}

TEST(TokenPicker, GreedyTakesTheFirstLargestLogit) {
  EXPECT_EQ(draws({0.1f, 2.5f, -1.0f, 2.5f}, settings(0), 3), (std::vector<int>{1, 1, 1}));
  // Greedy ignores top-k and the seed.
  EXPECT_EQ(draws({3.0f, 2.5f, 7.0f}, settings(0, 1, 99), 1), (std::vector<int>{2}));
}

TEST(TokenPicker, FrequenciesFollowTheSoftmaxAtTheTemperature) {
  // logits ln 1, ln 2, ln 4 at temperature 1: probabilities 1/7, 2/7, 4/7;
  // at temperature 0.5 the logits double: 1/21, 4/21, 16/21.
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f)};
  constexpr int kDraws = 40000;  // standard error <= 0.0025: a 0.015 margin is 6 of them
  const auto at_one = frequencies(draws(logits, settings(1.0), kDraws), 3);
  const auto at_half = frequencies(draws(logits, settings(0.5), kDraws), 3);
  const double expected_one[] = {1.0 / 7, 2.0 / 7, 4.0 / 7}, expected_half[] = {1.0 / 21, 4.0 / 21, 16.0 / 21};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(at_one[i], expected_one[i], 0.015) << "token " << i;
    EXPECT_NEAR(at_half[i], expected_half[i], 0.015) << "token " << i;
  }
}

TEST(TokenPicker, TopKDrawsOnlyAmongTheKLargestInTheirRenormalisedShares) {
  // Top 2 of these: ids 3 and 1 (logits 2 and 1), shares e/(1+e) and 1/(1+e).
  const std::vector<float> logits = {0.5f, 1.0f, -3.0f, 2.0f, 0.0f};
  const auto f = frequencies(draws(logits, settings(1.0, 2), 40000), 5);
  EXPECT_EQ(f[0] + f[2] + f[4], 0.0);
  EXPECT_NEAR(f[3], std::exp(1.0) / (1 + std::exp(1.0)), 0.015);
  // Top 1 at any temperature is greedy.
  for (int id : draws(logits, settings(5.0, 1), 200)) EXPECT_EQ(id, 3);
}

TEST(TokenPicker, TiesAtTheTopKCutKeepTheLowerIds) {
  const auto f = frequencies(draws({1.0f, 1.0f, 1.0f, 1.0f}, settings(1.0, 2), 2000), 4);
  EXPECT_GT(f[0], 0.4);
  EXPECT_GT(f[1], 0.4);
  EXPECT_EQ(f[2] + f[3], 0.0);
}

TEST(TokenPicker, TheLimitExcludesPaddedIds) {
  // Ids 3 and 4 pad the vocabulary past the tokenizer's 3: never drawn,
  // even where they would be the most likely.
  const std::vector<float> logits = {0.0f, 0.5f, 0.2f, 9.0f, 9.0f};
  EXPECT_EQ(draws(logits, settings(0, 0, 1, 3), 1), (std::vector<int>{1}));
  for (int id : draws(logits, settings(1.0, 0, 1, 3), 500)) EXPECT_LT(id, 3);
}

TEST(TokenPicker, ASeedGivesOneSequenceAnotherSeedAnother) {
  const std::vector<float> logits(50, 0.0f);  // uniform: 100 draws from 50 ids
  EXPECT_EQ(draws(logits, settings(1.0, 0, 7), 100), draws(logits, settings(1.0, 0, 7), 100));
  EXPECT_NE(draws(logits, settings(1.0, 0, 7), 100), draws(logits, settings(1.0, 0, 8), 100));
}

TEST(TokenPicker, NonFiniteLogitsAreARunError) {
  TokenPicker picker(settings(1.0));
  EXPECT_THROW(picker.pick(std::vector<float>{0.0f, NAN}), RunError);
  EXPECT_THROW(TokenPicker(settings(0)).pick(std::vector<float>{INFINITY, 0.0f}), RunError);
}

// ---- generation

const ModelShape kModel{.name = "sampling", .layers = 2, .hidden = 32, .heads = 2, .vocabulary = 64,
                       .sequence_length = 16};

// The stage's parameters as a weights-only checkpoint (the moments are not read).
io::Checkpoint checkpoint_of(model::Stage& stage, kernels::Backend& backend) {
  io::Checkpoint c;
  c.model = stage.config();
  for (const model::ParameterView& view : stage.parameters()) {
    io::CheckpointTensor t;
    t.name = view.name;
    t.shape = view.shape;
    t.value.resize(view.count);
    backend.download(t.value.data(), stage.params() + view.offset, view.count);
    c.tensors.push_back(std::move(t));
  }
  return c;
}

class Generation : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = kernels::make_cpu_backend();
    stage_ = std::make_unique<model::Stage>(kModel, model::StageSpec::whole(kModel), *backend_, 3, 1);
    stage_->initialize(5);
    // Larger weights than GPT-2's initialisation: peaked, decisive logits.
    std::vector<float> values(stage_->parameter_count());
    backend_->download(values.data(), stage_->params(), values.size());
    for (float& v : values) v *= 20;
    backend_->upload(stage_->params(), values.data(), values.size());
    checkpoint_ = checkpoint_of(*stage_, *backend_);
  }

  // Through the full-context stage (three rows, sequence length 16).
  std::vector<int> on_full_stage(const std::vector<int>& prompt, const SamplingSettings& s) {
    PipelineStep pipeline(*stage_, *backend_, plan::Schedule::gpipe, 0, 1, 1);
    Sampler sampler(*stage_, pipeline, *backend_, 0, 1);
    NoLinks links;
    LocalCollectives collectives;
    return sampler.generate(prompt, s, links, collectives);
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<model::Stage> stage_;
  io::Checkpoint checkpoint_;
};

TEST_F(Generation, AShortWindowGivesTheFullContextsTokens) {
  // 3 + 5 tokens: sample_checkpoint runs a window of 7 positions (wpe's
  // first 7 rows); the full stage runs 16 with padding after the text.
  SamplingSettings s = settings(0);
  s.tokens = 5;
  const std::vector<int> prompt = {7, 1, 60};
  const auto short_window = sample_checkpoint(checkpoint_, "mem.h5", *backend_, prompt, s);
  ASSERT_EQ(short_window.size(), 8u);
  EXPECT_EQ(std::vector<int>(short_window.begin(), short_window.begin() + 3), prompt);
  EXPECT_EQ(short_window, on_full_stage(prompt, s));
  s.temperature = 1.0;
  EXPECT_EQ(sample_checkpoint(checkpoint_, "mem.h5", *backend_, prompt, s), on_full_stage(prompt, s));
}

TEST_F(Generation, PastTheContextTheWindowSlides) {
  // 30 tokens after 3: from position 16 on each token sees the last 16.
  SamplingSettings s = settings(1.0, 0, 3);
  s.tokens = 30;
  const auto tokens = sample_checkpoint(checkpoint_, "mem.h5", *backend_, {5, 9, 2}, s);
  ASSERT_EQ(tokens.size(), 33u);
  EXPECT_EQ(tokens, on_full_stage({5, 9, 2}, s));
  for (int id : tokens) EXPECT_TRUE(id >= 0 && id < kModel.vocabulary);
  // Prompts of 20 tokens that differ only before their last 16 continue
  // alike, whatever the temperature: the first 4 are out of the window.
  std::vector<int> a(20), b(20);
  for (int i = 0; i < 20; ++i) a[i] = b[i] = (7 * i + 3) % kModel.vocabulary;
  b[0] = a[0] + 1, b[3] = a[3] + 1;
  s.tokens = 8;
  const auto from_a = sample_checkpoint(checkpoint_, "mem.h5", *backend_, a, s);
  const auto from_b = sample_checkpoint(checkpoint_, "mem.h5", *backend_, b, s);
  EXPECT_EQ(std::vector<int>(from_a.begin() + 20, from_a.end()), std::vector<int>(from_b.begin() + 20, from_b.end()));
  // ... and inside the window the prompt matters (the test could not fail otherwise).
  s.temperature = 0;
  s.tokens = 1;
  const int after_a = sample_checkpoint(checkpoint_, "mem.h5", *backend_, a, s).back();
  bool some_differs = false;
  for (int last = 0; last < kModel.vocabulary && !some_differs; ++last) {
    b[19] = last;
    some_differs = sample_checkpoint(checkpoint_, "mem.h5", *backend_, b, s).back() != after_a;
  }
  EXPECT_TRUE(some_differs);
}

TEST_F(Generation, ACheckpointOfAnotherModelIsBadInput) {
  ModelShape other = kModel;
  other.hidden = 16;
  model::Stage wrong(other, model::StageSpec::whole(other), *backend_, 1, 1);
  EXPECT_THROW(restore_parameters(wrong, *backend_, checkpoint_, "mem.h5"), InputError);
  ModelShape longer = kModel;
  longer.sequence_length = 32;  // more positions than wpe holds
  model::Stage too_long(longer, model::StageSpec::whole(longer), *backend_, 1, 1);
  EXPECT_THROW(restore_parameters(too_long, *backend_, checkpoint_, "mem.h5"), InputError);
  io::Checkpoint missing = checkpoint_;
  missing.tensors.pop_back();
  EXPECT_THROW(sample_checkpoint(missing, "mem.h5", *backend_, {1}, settings(0)), InputError);
}

TEST(EncodePrompt, NeedsATokenAndIdsInsideTheModelsVocabulary) {
  const auto bytes = io::make_byte_tokenizer();
  EXPECT_EQ(encode_prompt(*bytes, "Hi", 256, "p"), (std::vector<int>{72, 105}));
  try {
    encode_prompt(*bytes, "", 256, "command line: --prompt");
    FAIL() << "an empty prompt was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("command line: --prompt: encodes to no tokens"), std::string::npos);
  }
  try {
    encode_prompt(*bytes, "a\xc3\xa9", 128, "command line: --prompt");  // 0xC3 at token 1
    FAIL() << "id 195 was accepted by a 128-id model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token 1 of the prompt is id 195, outside the model's vocabulary of 128"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace geotrain::runtime
