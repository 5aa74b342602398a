#include "geotrain/runtime/run_inputs.hpp"

#include <sstream>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/tokenizer.hpp"
#include "geotrain/runtime/checkpointing.hpp"
#include "geotrain/runtime/sampler.hpp"

namespace geotrain::runtime {

StepLayout fixed_step_layout(const io::Config& config) {
  return {.source = "fixed",
          .stages = config.pipeline.stages,
          .tensor_parallel = config.pipeline.tensor_parallel,
          .layers_per_stage = config.pipeline.layers_per_stage,
          .micro_batch_sequences = config.train.micro_batch_sequences,
          .micro_batches = config.train.gradient_accumulation,
          .micro_batches_per_flush = config.pipeline.micro_batches_per_flush,
          .eval_batches = config.train.eval_batches};
}

std::string describe(const StepLayout& layout) {
  std::ostringstream text;
  text << "layout.source = \"" << layout.source << "\"\n"
       << "layout.stages = " << layout.stages << "\n"
       << "layout.tensor_parallel = " << layout.tensor_parallel << "\n"
       << "layout.layers_per_stage = [";
  for (std::size_t s = 0; s < layout.layers_per_stage.size(); ++s) text << (s ? ", " : "") << layout.layers_per_stage[s];
  text << "]\n"
       << "layout.micro_batch_sequences = " << layout.micro_batch_sequences << "\n"
       << "layout.micro_batches = " << layout.micro_batches << "\n"
       << "layout.micro_batches_per_flush = " << layout.micro_batches_per_flush << "\n"
       << "layout.eval_batches = " << layout.eval_batches << "\n";
  return text.str();
}

namespace {

// Another tokenizer's ids mean other text: the weights would start from
// embeddings of other pieces. A checkpoint converted from Hugging Face
// (weights only, no tokenizer recorded) does not say which it learnt with.
void check_same_tokenizer(const io::Checkpoint& init, const RunInputs& inputs, const io::Config& c) {
  if (init.tokenizer_text == inputs.tokenizer_text || (init.weights_only && init.tokenizer_text.empty())) return;
  const std::string file = io::tokenizer_file_for_shard(c.data.train);
  throw c.error("checkpoint.init_from", inputs.init_path + " was trained with " +
                                            (init.tokenizer_text.empty() ? "the byte tokenizer" : "a BPE tokenizer") +
                                            " (attribute tokenizer), but data.train " + c.data.train + " with " +
                                            (file.empty() ? "the byte tokenizer" : file) +
                                            ": start from a checkpoint trained on data of the same tokenizer");
}

}  // namespace

RunInputs inputs_of(io::Config config, const ModelShape& model) {
  RunInputs inputs;
  inputs.config = std::move(config);
  inputs.layout = fixed_step_layout(inputs.config);
  inputs.model = model;
  return inputs;
}

RunInputs prepare_run(io::Config config, const ModelShape& model) {
  RunInputs inputs = inputs_of(std::move(config), model);
  const io::Config& c = inputs.config;
  // Before the shards: a vocabulary too small for the tokenizer is named as such, not as a stray token id.
  inputs.tokenizer_text = io::tokenizer_text_for_training(c, model.vocabulary);
  if (c.train.sample_every_steps > 0) {
    inputs.sample_prompt = encode_prompt(*io::tokenizer_from_text(inputs.tokenizer_text, c.data.train), c.train.sample_prompt,
                                         model.vocabulary, c.origin_of("train.sample_prompt") + ": train.sample_prompt");
  }
  inputs.data.emplace(io::TokenDataset::from_shards(c.data.train, c.data.validation, model.vocabulary, c.train.seed));
  if (!c.checkpoint.resume.empty()) inputs.resume_path = io::resolve_resume(c.checkpoint.dir, c.checkpoint.resume);
  if (inputs.resume_path.empty()) {  // no resume, or auto and nothing written yet: a fresh start
    if (!c.checkpoint.init_from.empty()) {
      inputs.init_path = c.checkpoint.init_from;
      check_checkpoint_fits(inputs.init.emplace(io::read_checkpoint(inputs.init_path)), model, inputs.init_path);
      check_same_tokenizer(*inputs.init, inputs, c);
    }
    return inputs;
  }
  const io::Checkpoint& resume = inputs.resume.emplace(io::read_checkpoint(inputs.resume_path));
  if (resume.weights_only) {
    throw InputError(inputs.resume_path + ": attribute weights_only: the file holds weights only (no optimizer "
                     "state, e.g. from geotrain convert): start from it with checkpoint.init_from, not checkpoint.resume");
  }
  check_checkpoint_fits(resume, model, inputs.resume_path);
  if (resume.completed_steps >= c.train.steps) {
    throw c.error("train.steps", "is " + std::to_string(c.train.steps) + " but " +
                     inputs.resume_path + " has already trained " + std::to_string(resume.completed_steps) +
                     " steps: nothing left to train (raise train.steps to continue)");
  }
  return inputs;
}

}  // namespace geotrain::runtime
