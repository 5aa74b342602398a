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

// What every rank reads and checks before it talks to the others (any
// failure is bad input, exit 2): the config, the model with its overrides,
// the token data, and the checkpoint to resume from or start from, if any.
struct RunInputs {
  io::Config config;
  ModelShape model;
  std::optional<io::TokenDataset> data;
  std::string tokenizer_text;  // the training shard's tokenizer file ("" = byte), kept in checkpoints
  std::vector<int> sample_prompt;  // train.sample_prompt's ids, when train.sample_every_steps > 0
  std::optional<io::Checkpoint> resume;
  std::string resume_path;
  std::optional<io::Checkpoint> init;  // checkpoint.init_from: weights only are used; never with `resume`
  std::string init_path;
};

// Loads data and the resume (or init_from) checkpoint for `config` and
// `model`; checks the checkpoint fits the model, that a resumed one has
// optimizer state and leaves steps to train (InputError naming the field
// otherwise).
RunInputs prepare_run(io::Config config, const ModelShape& model);

}  // namespace geotrain::runtime
