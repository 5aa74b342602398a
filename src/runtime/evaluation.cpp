#include "geotrain/runtime/evaluation.hpp"

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/tokenizer.hpp"
#include "geotrain/runtime/checkpointing.hpp"
#include "geotrain/runtime/progress_log.hpp"

namespace geotrain::runtime {

double validation_loss(PipelineStep& pipeline, PipelineLinks& links, Collectives& collectives,
                       const io::TokenDataset& data, int B, int T, int eval_batches, int replicas,
                       int* global_batches) {
  const int per_replica = (eval_batches + replicas - 1) / replicas;
  const auto batches = data.validation_batches(B, T, per_replica);
  double sum = 0;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    sum += pipeline.forward_only({batches[i].inputs.data(), batches[i].targets.data()}, links, static_cast<int>(i));
  }
  // Over the replica's stages (only the last has a loss), then the replicas.
  const double total = collectives.sum_data_parallel_value(collectives.sum_over_pipeline(sum));
  if (global_batches != nullptr) *global_batches = static_cast<int>(batches.size()) * replicas;
  return batches.empty() ? std::nan("") : total / (static_cast<double>(batches.size()) * replicas);
}

RunInputs prepare_evaluation(io::Config config, const ModelShape& model) {
  RunInputs inputs = inputs_of(std::move(config), model);
  const io::Config& c = inputs.config;
  inputs.data.emplace(std::vector<std::uint16_t>{}, io::read_token_shard(c.data.validation, model.vocabulary), c.train.seed,
                      c.data.train, c.data.validation);
  if (c.checkpoint.resume.empty()) return inputs;
  inputs.resume_path = io::resolve_resume(c.checkpoint.dir, c.checkpoint.resume);
  if (inputs.resume_path.empty()) return inputs;  // auto, and nothing written yet: the initialised model
  const io::Checkpoint& checkpoint = inputs.resume.emplace(io::read_checkpoint(inputs.resume_path));
  check_checkpoint_fits(checkpoint, model, inputs.resume_path);
  // Another tokenizer's ids mean other text: the loss would be meaningless.
  if (io::tokenizer_text_for_shard(c.data.validation) != checkpoint.tokenizer_text) {
    const std::string file = io::tokenizer_file_for_shard(c.data.validation);
    throw c.error("data.validation", c.data.validation + " was made with " +
                     (file.empty() ? "the byte tokenizer" : file) + ", but " + inputs.resume_path +
                     " was trained with " + (checkpoint.tokenizer_text.empty() ? "the byte tokenizer" : "another") +
                     " (attribute tokenizer)");
  }
  return inputs;
}

namespace {

// What decides which batches a loss is the mean of: the training's values
// (from the checkpoint's config), so that eval scores what training scored.
constexpr const char* kScoringKeys[] = {"data.train", "data.validation", "train.micro_batch_sequences",
                                        "train.eval_batches", "train.seed"};

// The checkpoint's "section.key = value" lines of kScoringKeys as
// --key=value overrides, then the command line's own (which win).
std::vector<std::string> training_settings(const std::string& config_text, const std::vector<std::string>& overrides) {
  std::vector<std::string> settings;
  std::istringstream lines(config_text);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t equals = line.find(" = ");
    if (equals == std::string::npos) continue;
    const std::string key = line.substr(0, equals);
    for (const char* wanted : kScoringKeys) {
      if (key == wanted) settings.push_back("--" + key + "=" + line.substr(equals + 3));
    }
  }
  settings.insert(settings.end(), overrides.begin(), overrides.end());
  return settings;
}

}  // namespace

EvaluationSettings read_evaluation_settings(const std::string& config_file, const std::vector<std::string>& overrides) {
  io::Config config = io::read_config(config_file, overrides);
  const std::string resume =
      config.checkpoint.resume.empty() ? "" : io::resolve_resume(config.checkpoint.dir, config.checkpoint.resume);
  if (resume.empty()) {
    const ModelShape model = io::load_model(config).model;
    return {std::move(config), model};
  }
  // The model (and, without a config file, the data and batches) are the
  // checkpoint's: no model file or inputs/ folder is needed.
  const io::Checkpoint header = io::read_checkpoint_header(resume);
  if (config_file.empty()) config = io::default_config(training_settings(header.config_text, overrides));
  const ModelShape model = io::model_of_checkpoint(config, header, resume, "eval");
  return {std::move(config), model};
}

RunInputs read_evaluation_inputs(const std::string& config_file, const std::vector<std::string>& overrides) {
  EvaluationSettings settings = read_evaluation_settings(config_file, overrides);
  return prepare_evaluation(std::move(settings.config), settings.model);
}

Evaluation evaluate(RunInputs& inputs, const RankRole& role, const RankConnections& with) {
  const io::Config& c = inputs.config;
  const int B = inputs.layout.micro_batch_sequences, T = inputs.model.sequence_length;
  with.backend.set_matmul_precision(c.device.matmul_precision);
  model::Stage stage(inputs.model, role.spec, with.backend, B, 1, with.tensor_group);
  if (inputs.resume) {
    restore_parameters(stage, with.backend, *inputs.resume, inputs.resume_path);
  } else {
    stage.initialize(c.train.seed);
  }
  PipelineStep pipeline(stage, with.backend, c.pipeline.schedule, role.stage, role.stages, 1);
  inputs.data->set_replica(role.replica, role.replicas);
  Evaluation e;
  e.loss = validation_loss(pipeline, with.links, with.collectives, *inputs.data, B, T, inputs.layout.eval_batches, role.replicas,
                           &e.global_batches);
  return e;
}

Evaluation evaluate_single_rank(RunInputs& inputs) {
  const std::unique_ptr<kernels::Backend> backend = kernels::make_backend(inputs.config.device.kind);
  NoLinks no_links;
  LocalCollectives collectives;
  RankRole role;
  role.spec = model::StageSpec::whole(inputs.model);
  return evaluate(inputs, role, {*backend, no_links, collectives, nullptr});
}

std::string evaluation_report(const Evaluation& e, const RunInputs& inputs) {
  const io::Config& c = inputs.config;
  const long long steps = inputs.resume ? static_cast<long long>(inputs.resume->completed_steps) : 0;
  char numbers[160];
  if (c.train.log_json) {
    std::snprintf(numbers, sizeof numbers,
                  ", \"completed_steps\": %lld, \"global_batches\": %d, \"validation_loss\": %.9g, \"perplexity\": %.9g}\n",
                  steps, e.global_batches, e.loss, std::exp(e.loss));
    const std::string checkpoint = inputs.resume ? json_string(inputs.resume_path) : "null";
    return "{\"event\": \"eval\", \"checkpoint\": " + checkpoint +
           ", \"validation\": " + json_string(c.data.validation) + numbers;
  }
  const std::string what = inputs.resume ? inputs.resume_path + " (after step " + std::to_string(steps) + ")"
                                         : "the initialised model (train.seed " + std::to_string(c.train.seed) + ", no checkpoint)";
  std::snprintf(numbers, sizeof numbers, "validation loss %.6f (perplexity %.3f)\n", e.loss, std::exp(e.loss));
  return "geotrain eval: " + what + ", " + std::to_string(e.global_batches) + " batches x " +
         std::to_string(inputs.layout.micro_batch_sequences) + " sequences x " + std::to_string(inputs.model.sequence_length) +
         " tokens of " + c.data.validation + "\n" + numbers;
}

}  // namespace geotrain::runtime
