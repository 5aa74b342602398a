// Whole-model gradient check: the analytic gradient of the mean loss against
// central finite differences of the loss, along random directions that cover
// one parameter tensor at a time. fp32 forward passes limit the precision of
// the difference quotient, so each check compares a directional derivative
// (a sum over the whole tensor) rather than single entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"

namespace geotrain::model {
namespace {

const ModelShape kSmall{.name = "gradient-check", .layers = 2, .hidden = 16, .heads = 2, .vocabulary = 11,
                       .sequence_length = 6};
// A longer context and the byte vocabulary, as in training: blocked loops
// and threading paths that the small shapes do not reach.
const ModelShape kBytes{.name = "gradient-check-bytes", .layers = 1, .hidden = 32, .heads = 4, .vocabulary = 256,
                       .sequence_length = 64};
// The small shape with its own LM head matrix (model.lm_head = "untied").
const ModelShape kSmallUntied{.name = "gradient-check-untied", .layers = 2, .hidden = 16, .heads = 2,
                              .vocabulary = 11, .sequence_length = 6, .tied_head = false};
// The shipped tiny model itself (inputs/models/tiny.toml).
const ModelShape kTiny{.name = "tiny", .layers = 4, .hidden = 128, .heads = 4, .vocabulary = 256,
                      .sequence_length = 128};

struct Batch {
  std::vector<int> tokens, targets;
};

Batch random_batch(const ModelShape& c, int B, std::mt19937& rng) {
  std::uniform_int_distribution<int> token(0, c.vocabulary - 1);
  Batch b;
  for (int i = 0; i < B * c.sequence_length; ++i) b.tokens.push_back(token(rng)), b.targets.push_back(token(rng));
  return b;
}

class ModelGradients : public ::testing::TestWithParam<std::pair<ModelShape, int>> {};

TEST_P(ModelGradients, MatchFiniteDifferencesForEveryTensor) {
  auto backend = kernels::make_cpu_backend();
  const ModelShape config = GetParam().first;
  const int B = GetParam().second;
  Stage stage(config, StageSpec::whole(config), *backend, B, 1);
  stage.initialize(7);
  std::mt19937 rng(3);
  const Batch batch = random_batch(config, B, rng);
  const float tokens = static_cast<float>(B * config.sequence_length);

  stage.zero_grads();
  stage.forward(0, batch.tokens.data(), nullptr, batch.targets.data());
  stage.backward(0, nullptr, 1.0f / tokens);
  std::vector<float> params(stage.parameter_count()), grads(stage.parameter_count());
  backend->download(params.data(), stage.params(), params.size());
  backend->download(grads.data(), stage.grads(), grads.size());

  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ParameterView& view : stage.parameters()) {
    std::vector<float> direction(view.count);
    double analytic = 0, norm = 0;
    for (std::size_t i = 0; i < view.count; ++i) {
      direction[i] = normal(rng);
      analytic += static_cast<double>(direction[i]) * grads[view.offset + i];
      norm += static_cast<double>(direction[i]) * direction[i];
    }
    // Small enough that curvature does not show (a bias moves every token),
    // large enough that fp32 rounding of the loss (~1e-7) stays below 1e-3.
    const double epsilon = 1e-3 / std::sqrt(norm / view.count);
    auto loss_at = [&](double sign) {
      std::vector<float> shifted = params;
      for (std::size_t i = 0; i < view.count; ++i) {
        shifted[view.offset + i] += static_cast<float>(sign * epsilon * direction[i]);
      }
      backend->upload(stage.params(), shifted.data(), shifted.size());
      return stage.forward(0, batch.tokens.data(), nullptr, batch.targets.data());
    };
    const double numeric = (loss_at(+1) - loss_at(-1)) / (2 * epsilon);
    EXPECT_NEAR(analytic, numeric, 1e-2 * std::abs(numeric) + 3e-4) << view.name;
  }
  backend->upload(stage.params(), params.data(), params.size());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ModelGradients,
                         ::testing::Values(std::make_pair(kSmall, 2), std::make_pair(kBytes, 4),
                                           std::make_pair(kTiny, 1), std::make_pair(kSmallUntied, 2)));

// An untied head that starts as a copy of wte computes the tied model: the
// same loss, and the tied wte's gradient is the sum of the untied model's
// wte and lm_head gradients (the two uses of one matrix).
TEST(ModelStages, AnUntiedHeadEqualToWteIsTheTiedModel) {
  auto backend = kernels::make_cpu_backend();
  const int B = 2;
  std::mt19937 rng(8);
  const Batch batch = random_batch(kSmall, B, rng);
  const float scale = 1.0f / static_cast<float>(B * kSmall.sequence_length);
  Stage tied(kSmall, StageSpec::whole(kSmall), *backend, B, 1), untied(kSmallUntied, StageSpec::whole(kSmallUntied), *backend, B, 1);
  tied.initialize(4);
  untied.initialize(4);
  ASSERT_EQ(tied.find("lm_head.weight"), nullptr);
  const ParameterView *wte = untied.find("wte"), *head = untied.find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(untied.parameter_count(), tied.parameter_count() + head->count);
  std::vector<float> copy(wte->count);
  backend->download(copy.data(), tied.params() + tied.find("wte")->offset, copy.size());
  backend->upload(untied.params() + head->offset, copy.data(), copy.size());
  double losses[2];
  Stage* stages[2] = {&tied, &untied};
  for (int k = 0; k < 2; ++k) {
    stages[k]->zero_grads();
    losses[k] = stages[k]->forward(0, batch.tokens.data(), nullptr, batch.targets.data());
    stages[k]->backward(0, nullptr, scale);
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-6 * losses[0]);
  auto gradient = [&](Stage& stage, const ParameterView& view) {
    std::vector<float> g(view.count);
    backend->download(g.data(), stage.grads() + view.offset, view.count);
    return g;
  };
  const std::vector<float> whole = gradient(tied, *tied.find("wte")), embedding = gradient(untied, *wte),
                           projection = gradient(untied, *head);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    ASSERT_NEAR(embedding[i] + projection[i], whole[i], 1e-5f + 1e-4f * std::abs(whole[i])) << "element " << i;
  }
  // A last stage of an untied pipeline holds no wte at all.
  const std::vector<ParameterView> last = parameter_layout(kSmallUntied, {1, 2, false, true});
  EXPECT_TRUE(std::none_of(last.begin(), last.end(), [](const ParameterView& v) { return v.name == "wte"; }));
}

TEST(ModelStages, PipelineStagesChainToTheWholeModel) {
  // Two stages (layers [0,1) with the embedding, [1,2) with the head) fed
  // by hand give the loss and gradients of the single stage.
  auto backend = kernels::make_cpu_backend();
  const ModelShape config = kSmall;
  const int B = 2;
  std::mt19937 rng(5);
  const Batch batch = random_batch(config, B, rng);
  const float scale = 1.0f / static_cast<float>(B * config.sequence_length);

  Stage whole(config, StageSpec::whole(config), *backend, B, 1);
  whole.initialize(11);
  whole.zero_grads();
  const double loss = whole.forward(0, batch.tokens.data(), nullptr, batch.targets.data());
  whole.backward(0, nullptr, scale);

  Stage first(config, {0, 1, true, false}, *backend, B, 1), last(config, {1, 2, false, true}, *backend, B, 1);
  first.initialize(11);
  last.initialize(11);
  first.zero_grads();
  last.zero_grads();
  first.forward(0, batch.tokens.data(), nullptr, nullptr);
  const double piped = last.forward(0, nullptr, first.output(0), batch.targets.data());
  last.backward(0, nullptr, scale);
  first.backward(0, last.dinput(), 0.0f);
  EXPECT_NEAR(piped, loss, 1e-6 * std::abs(loss));

  auto gradient_of = [&](Stage& stage, const std::string& name) {
    const ParameterView* v = stage.find(name);
    std::vector<float> g(v->count);
    backend->download(g.data(), stage.grads() + v->offset, v->count);
    return g;
  };
  for (const ParameterView& view : whole.parameters()) {
    std::vector<float> expected = gradient_of(whole, view.name);
    std::vector<float> got(view.count, 0.0f);
    for (Stage* stage : {&first, &last}) {
      if (!stage->find(view.name)) continue;
      const auto part = gradient_of(*stage, view.name);  // wte: embedding part + tied head part
      for (std::size_t i = 0; i < got.size(); ++i) got[i] += part[i];
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], expected[i], 1e-5 * std::abs(expected[i]) + 1e-7) << view.name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace geotrain::model
