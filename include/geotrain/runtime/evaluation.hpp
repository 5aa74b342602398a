// The validation loss: during training (every train.eval_every_steps and at
// the end) and without it (`geotrain eval`: a checkpoint, alone or on every
// rank of an mpirun job laid out as training is, reading and writing nothing
// but the validation shard, the checkpoint and stdout).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "geotrain/io/token_shard.hpp"
#include "geotrain/runtime/gradient_sync.hpp"
#include "geotrain/runtime/pipeline.hpp"
#include "geotrain/runtime/rank_role.hpp"
#include "geotrain/runtime/run_inputs.hpp"

namespace geotrain::runtime {

// Mean validation loss over the first eval_batches global batches: replica r
// evaluates batches r, r + R, ... (TokenDataset's validation order), each
// through the pipeline, forward only. Collective over the job; the same on
// every rank. `global_batches`, when given, receives the batches evaluated.
double validation_loss(PipelineStep& pipeline, PipelineLinks& links, Collectives& collectives,
                       const io::TokenDataset& data, int B, int T, int eval_batches, int replicas,
                       int* global_batches = nullptr);

// What `geotrain eval` reads, checked before any rank talks to another: the
// config, the model, the validation shard (the training shard is not read)
// and the checkpoint of checkpoint.resume (a file, or auto: checkpoint.dir's
// latest; none: the model as train.seed initialises it, the loss a run
// prints before training). Unlike training, a checkpoint of any step is
// fine. Throws InputError naming the file and field.
RunInputs prepare_evaluation(io::Config config, const ModelShape& model);
// eval's settings from a config file ("" = defaults) and --key=value
// overrides: the model is checkpoint.resume's (a model.* value that
// contradicts it is an error naming both) and, without a config file, so are
// the data and batches the training scored; without a checkpoint, the
// config's model.
struct EvaluationSettings {
  io::Config config;
  ModelShape model;
};
EvaluationSettings read_evaluation_settings(const std::string& config_file, const std::vector<std::string>& overrides);
// prepare_evaluation of read_evaluation_settings.
RunInputs read_evaluation_inputs(const std::string& config_file, const std::vector<std::string>& overrides);

struct Evaluation {
  double loss = 0;
  int global_batches = 0;
};

// This rank's part: its stage's parameters from the checkpoint, the
// validation batches of its replica through its pipeline. The same result
// on every rank.
Evaluation evaluate(RunInputs& inputs, const RankRole& role, const RankConnections& with);
// One process, the whole model as one stage (whatever pipeline.stages says:
// the layout does not change the loss beyond rounding).
Evaluation evaluate_single_rank(RunInputs& inputs);

// What `geotrain eval` prints: what was evaluated, then
// "validation loss 2.411164 (perplexity 11.147)"; with train.log_json one
// JSON line {"event": "eval", ...} instead.
std::string evaluation_report(const Evaluation& evaluation, const RunInputs& inputs);

}  // namespace geotrain::runtime
