// geotrain eval: the validation loss of a checkpoint on the configured
// validation data, the batches a training run evaluates at its end; alone,
// or under mpirun/srun with the layouts training supports. Trains nothing and
// writes no file.
#include <CLI/CLI.hpp>
#include <iostream>

#include "geotrain/cli/commands.hpp"
#include "geotrain/runtime/evaluation.hpp"
#ifdef GEOTRAIN_HAVE_MPI_TRAINING
#include "geotrain/job/distributed_job.hpp"
#endif

namespace geotrain::cli {

void add_eval_command(CLI::App& app, EvalCommandOptions& o) {
  add_config_subcommand(app, "eval",
                        "Validation loss of a checkpoint, alone or as every rank of an mpirun/srun job: "
                        "geotrain eval [CONFIG.toml] [--checkpoint.resume=FILE] [--section.key=value ...]",
                        o.config_file, o.overrides);
}

int run_eval_command(const EvalCommandOptions& o) {
#ifdef GEOTRAIN_HAVE_MPI_TRAINING
  if (runtime::launched_by_mpi()) return runtime::run_distributed_evaluation(o.config_file, o.overrides, std::cout);
#endif
  runtime::RunInputs inputs = runtime::read_evaluation_inputs(o.config_file, o.overrides);
  const runtime::Evaluation evaluation = runtime::evaluate_single_rank(inputs);
  std::cout << runtime::evaluation_report(evaluation, inputs) << std::flush;
  return 0;
}

}  // namespace geotrain::cli
