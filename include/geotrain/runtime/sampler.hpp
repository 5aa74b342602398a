// Text generation with a trained model: `geotrain sample`, and the samples a
// training run prints every train.sample_every_steps. Autoregressive, one
// forward pass per new token over the last sequence_length tokens (no
// key/value cache: each pass recomputes the window, which keeps the model
// code the training code), through the stages of one replica's pipeline.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/tokenizer.hpp"
#include "geotrain/kernels/backend.hpp"
#include "geotrain/model/gpt.hpp"
#include "geotrain/runtime/gradient_sync.hpp"
#include "geotrain/runtime/pipeline.hpp"

namespace geotrain::runtime {

struct SamplingSettings {
  int tokens = 64;           // new tokens after the prompt
  double temperature = 1.0;  // 0: greedy (the most likely token)
  int top_k = 0;             // > 0: draw among the k most likely only
  std::uint64_t seed = 1;
  // > 0: only ids below it are drawn. A model's vocabulary may be padded
  // past its tokenizer's (llm.c's GPT-2: 50304 for 50257), and the padding
  // ids decode to nothing.
  int token_limit = 0;
};

// Chooses tokens from logits. The uniform draw is made here from the
// generator's bits rather than by a standard library distribution (whose
// algorithm each library chooses), so a seed gives the same text everywhere.
class TokenPicker {
 public:
  explicit TokenPicker(const SamplingSettings& settings);
  // Temperature 0: the first largest logit. Otherwise one draw from
  // softmax(logits / temperature) over the top_k largest (all when top_k is
  // 0; ties at the cut keep the lower ids). Throws RunError when the
  // logits are not finite (a diverged model).
  int pick(std::span<const float> logits);

 private:
  double temperature_;
  int top_k_, token_limit_;
  std::mt19937_64 generator_;
};

// Generation through one replica's pipeline. Every stage of the replica
// calls generate() with the same prompt and settings: the first stage embeds
// the window, activations travel the pipeline links as in validation, the
// last stage picks the token, and a sum over the pipeline (the others add
// 0) hands it to every stage for the next position. A single stage is the
// same without links.
class Sampler {
 public:
  // `stage` is stage `stage_index` of `stages`, run by `pipeline`. The first
  // row of its micro-batch carries the window (other rows are computed and
  // ignored); its sequence length is the window's.
  Sampler(model::Stage& stage, PipelineStep& pipeline, kernels::Backend& backend, int stage_index, int stages);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // The prompt followed by settings.tokens new tokens, the same on every
  // stage. Each new token sees the last sequence_length tokens before it.
  std::vector<int> generate(std::vector<int> tokens, const SamplingSettings& settings, PipelineLinks& links,
                            Collectives& collectives);

 private:
  // Last stage, after a forward pass: the logits of row 0 at `position`.
  std::vector<float> logits_at(int position);

  model::Stage& stage_;
  PipelineStep& pipeline_;
  kernels::Backend& backend_;
  const bool last_;
  const int stages_;
  float *normed_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr, *logits_ = nullptr;
};

// One process: the checkpoint's whole model as one stage on `backend`, one
// sequence per pass, a window of min(sequence_length, prompt + tokens - 1)
// positions (a short text costs a short window); `path` names the file in
// errors.
std::vector<int> sample_checkpoint(const io::Checkpoint& checkpoint, const std::string& path,
                                   kernels::Backend& backend, std::vector<int> prompt,
                                   const SamplingSettings& settings);

// `text` as ids of `tokenizer`, checked for a model of `vocabulary` ids: at
// least one token, every id below it. Throws InputError "<where>: <what>".
std::vector<int> encode_prompt(const io::Tokenizer& tokenizer, const std::string& text, int vocabulary,
                               const std::string& where);

}  // namespace geotrain::runtime
