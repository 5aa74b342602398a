#include "geotrain/runtime/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "geotrain/common/errors.hpp"
#include "geotrain/runtime/checkpointing.hpp"

namespace geotrain::runtime {

TokenPicker::TokenPicker(const SamplingSettings& settings)
    : temperature_(settings.temperature), top_k_(settings.top_k), token_limit_(settings.token_limit),
      generator_(settings.seed) {}

int TokenPicker::pick(std::span<const float> all_logits) {
  const std::span<const float> logits =
      token_limit_ > 0 ? all_logits.first(std::min<std::size_t>(all_logits.size(), token_limit_)) : all_logits;
  for (const float value : logits) {
    if (!std::isfinite(value)) throw RunError("sampling: the model's logits are not finite (a diverged model?)");
  }
  const int V = static_cast<int>(logits.size());
  if (temperature_ == 0) return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int> kept(static_cast<std::size_t>(V));
  std::iota(kept.begin(), kept.end(), 0);
  if (top_k_ > 0 && top_k_ < V) {
    const auto more_likely = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::nth_element(kept.begin(), kept.begin() + top_k_ - 1, kept.end(), more_likely);
    kept.resize(static_cast<std::size_t>(top_k_));
    std::sort(kept.begin(), kept.end());  // the draw walks ids in order, whatever the selection left
  }
  float largest = logits[kept[0]];
  for (const int id : kept) largest = std::max(largest, logits[id]);
  std::vector<double> weights;
  double total = 0;
  for (const int id : kept) {
    weights.push_back(std::exp((static_cast<double>(logits[id]) - largest) / temperature_));
    total += weights.back();
  }
  // 53 random bits: a uniform double in [0, 1).
  const double u = static_cast<double>(generator_() >> 11) * 0x1.0p-53;
  const double target = u * total;
  double cumulative = 0;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    cumulative += weights[i];
    if (cumulative > target) return kept[i];
  }
  return kept.back();  // u * total rounded up to the whole sum
}

Sampler::Sampler(model::Stage& stage, PipelineStep& pipeline, kernels::Backend& backend, int stage_index,
                 int stages)
    : stage_(stage), pipeline_(pipeline), backend_(backend), last_(stage_index == stages - 1), stages_(stages) {
  if (!last_) return;
  const std::size_t C = stage.config().hidden, V = stage.vocabulary().rows;
  normed_ = backend_.alloc(C);
  mean_ = backend_.alloc(1);
  rstd_ = backend_.alloc(1);
  logits_ = backend_.alloc(V);
}

Sampler::~Sampler() {
  for (float* p : {normed_, mean_, rstd_, logits_}) {
    if (p != nullptr) backend_.release(p);
  }
}

std::vector<int> Sampler::generate(std::vector<int> tokens, const SamplingSettings& settings, PipelineLinks& links,
                                   Collectives& collectives) {
  if (tokens.empty()) throw std::invalid_argument("Sampler::generate: a prompt of no tokens");
  const int T = stage_.config().sequence_length;
  std::vector<int> batch(static_cast<std::size_t>(stage_.micro_batch()) * T, 0);
  TokenPicker picker(settings);
  for (int i = 0; i < settings.tokens; ++i) {
    const int window = std::min(T, static_cast<int>(tokens.size()));
    std::copy(tokens.end() - window, tokens.end(), batch.begin());
    // Positions past the window cannot influence it (causal attention);
    // zeros keep every pass's input defined.
    std::fill(batch.begin() + window, batch.begin() + T, 0);
    pipeline_.forward_only({batch.data(), nullptr}, links, 0);
    double next = last_ ? picker.pick(logits_at(window - 1)) : 0.0;
    // Ids are exact in a double: the sum is the last stage's choice.
    if (stages_ > 1) next = collectives.sum_over_pipeline(next);
    tokens.push_back(static_cast<int>(next));
  }
  return tokens;
}

// The head of Stage::forward (final layernorm, then the tied embedding as
// the output matrix) on the one row that predicts the next token. Tensor
// parallelism: each rank's rows of the vocabulary, put together over the
// unit (every rank then picks the same token from the same logits).
std::vector<float> Sampler::logits_at(int position) {
  const int C = stage_.config().hidden, V = stage_.vocabulary().rows;
  float* params = stage_.params();
  const float* hidden = stage_.output(0) + static_cast<std::size_t>(position) * C;
  backend_.layernorm_forward(normed_, mean_, rstd_, hidden, params + stage_.find("lnf.weight")->offset,
                             params + stage_.find("lnf.bias")->offset, 1, C);
  backend_.matmul_forward(logits_, normed_, params + stage_.lm_head()->offset, nullptr, 1, C, V);
  std::vector<float> host(static_cast<std::size_t>(V));
  backend_.download(host.data(), logits_, host.size());
  model::TensorGroup* group = stage_.tensor_group();
  if (group == nullptr) return host;
  std::vector<float> whole(static_cast<std::size_t>(stage_.config().vocabulary), 0.0f);
  std::copy(host.begin(), host.end(), whole.begin() + stage_.vocabulary().begin);
  group->sum_host(whole.data(), whole.size());
  return whole;
}

std::vector<int> sample_checkpoint(const io::Checkpoint& checkpoint, const std::string& path,
                                   kernels::Backend& backend, std::vector<int> prompt,
                                   const SamplingSettings& settings) {
  ModelShape shape = checkpoint.model;
  const long long longest_window = static_cast<long long>(prompt.size()) + settings.tokens - 1;
  shape.sequence_length = static_cast<int>(std::clamp<long long>(longest_window, 1, shape.sequence_length));
  model::Stage stage(shape, model::StageSpec::whole(shape), backend, 1, 1);
  restore_parameters(stage, backend, checkpoint, path);
  PipelineStep pipeline(stage, backend, plan::Schedule::gpipe, 0, 1, 1);
  Sampler sampler(stage, pipeline, backend, 0, 1);
  NoLinks links;
  LocalCollectives collectives;
  return sampler.generate(std::move(prompt), settings, links, collectives);
}

std::vector<int> encode_prompt(const io::Tokenizer& tokenizer, const std::string& text, int vocabulary,
                               const std::string& where) {
  std::vector<int> ids = tokenizer.encode(text);
  if (ids.empty()) throw InputError(where + ": encodes to no tokens (the prompt needs at least one character)");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocabulary) {
      throw InputError(where + ": token " + std::to_string(i) + " of the prompt is id " + std::to_string(ids[i]) +
                       ", outside the model's vocabulary of " + std::to_string(vocabulary) + " ids (tokenizer: " +
                       tokenizer.description() + ")");
    }
  }
  return ids;
}

}  // namespace geotrain::runtime
