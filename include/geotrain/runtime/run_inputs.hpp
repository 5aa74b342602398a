// What every rank reads and checks before it talks to the others, for
// `train` and `eval` alike.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "geotrain/common/model_shape.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/config.hpp"
#include "geotrain/io/token_shard.hpp"

namespace geotrain::runtime {

// How the job cuts up a step: the config's keys for a fixed layout, or what
// the layout search or a plan file chose. The config itself stays as the user
// wrote it; checkpoints and timing files record both (attributes "config"
// and "layout").
struct StepLayout {
  std::string source = "fixed";      // "fixed" (the config's keys), "auto", or the plan file's path
  int stages = 1;
  int tensor_parallel = 1;
  std::vector<int> layers_per_stage;  // pipeline order; empty: an even split
  int micro_batch_sequences = 1;
  int micro_batches = 1;              // per replica per step (the pipeline's m)
  int micro_batches_per_flush = 0;    // 0: one flush per step
  int eval_batches = 1;               // validation batches of micro_batch_sequences per replica

  int flushes() const { return micro_batches_per_flush > 0 ? micro_batches / micro_batches_per_flush : 1; }
};

// The layout the config's keys fix (pipeline.*, train.micro_batch_sequences,
// train.gradient_accumulation, train.eval_batches).
StepLayout fixed_step_layout(const io::Config& config);
// The layout as TOML ("layout.key = value" lines), as checkpoints and timing files keep it.
std::string describe(const StepLayout& layout);

// What every rank reads and checks before it talks to the others (any
// failure is bad input, exit 2): the config, the model with its overrides,
// the token data, and the checkpoint to resume from or start from, if any.
struct RunInputs {
  io::Config config;  // as the user wrote it
  StepLayout layout;  // what runs: fixed_step_layout(config) unless the job chose another
  ModelShape model;
  std::optional<io::TokenDataset> data;
  std::string tokenizer_text;  // the training shard's tokenizer file ("" = byte), kept in checkpoints
  std::vector<int> sample_prompt;  // train.sample_prompt's ids, when train.sample_every_steps > 0
  std::optional<io::Checkpoint> resume;
  std::string resume_path;
  std::optional<io::Checkpoint> init;  // checkpoint.init_from: weights only are used; never with `resume`
  std::string init_path;
};

// The config as written, its fixed layout and the model: what prepare_run and
// prepare_evaluation start from before they read data and checkpoints.
RunInputs inputs_of(io::Config config, const ModelShape& model);

// Loads data and the resume (or init_from) checkpoint for `config` and
// `model`; checks the checkpoint fits the model, that a resumed one has
// optimizer state and leaves steps to train (InputError naming the field
// otherwise).
RunInputs prepare_run(io::Config config, const ModelShape& model);

}  // namespace geotrain::runtime
