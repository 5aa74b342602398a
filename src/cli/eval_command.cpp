// geotrain eval: the validation loss of a checkpoint on the configured
// validation data, the batches a training run evaluates at its end; alone,
// or under mpirun/srun with the layouts training supports. Trains nothing and
// writes no file.
#include <CLI/CLI.hpp>
#include <iostream>

#include "geotrain/cli/commands.hpp"
#include "geotrain/runtime/evaluation.hpp"

namespace geotrain::cli {

void add_eval_command(CLI::App& app, EvalCommandOptions& o) {
  add_config_subcommand(app, "eval",
                        "Validation loss of a checkpoint (checkpoint.resume; its model, and without CONFIG its data "
                        "and batches), alone or as every rank of an mpirun/srun job",
                        o);
}

int run_eval_command(const EvalCommandOptions& o) {
  if (const int code = run_if_launched_by_mpi(o, true); code >= 0) return code;
  runtime::RunInputs inputs = runtime::read_evaluation_inputs(o.config_file, o.overrides);
  const runtime::Evaluation evaluation = runtime::evaluate_single_rank(inputs);
  std::cout << runtime::evaluation_report(evaluation, inputs) << std::flush;
  return 0;
}

}  // namespace geotrain::cli
