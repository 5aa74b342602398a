#include <CLI/CLI.hpp>
#include <iostream>

#include "geotrain/cli/commands.hpp"
#include "geotrain/io/config.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/model_file.hpp"
#include "geotrain/io/timing_file.hpp"
#include "geotrain/runtime/progress_log.hpp"
#include "geotrain/runtime/timing_record.hpp"
#include "geotrain/runtime/trainer.hpp"
#ifdef GEOTRAIN_HAVE_MPI_TRAINING
#include "geotrain/job/distributed_job.hpp"
#endif

namespace geotrain::cli {

CLI::App* add_config_subcommand(CLI::App& app, const std::string& name, const std::string& description,
                                ConfigCommandOptions& options) {
  CLI::App* command = app.add_subcommand(
      name, description + ": geotrain " + name + " [CONFIG.toml] [--section.key=value ...]");
  command->add_option("config", options.config_file, "run configuration (TOML); defaults without it");
  command->allow_extras();  // --section.key=value overrides, checked by the config loader
  command->callback([command, &options] { options.overrides = command->remaining(); });
  // Every key with its default and doc, from the settings tree itself.
  command->footer([] { return "\n" + io::config_reference_text(); });
  command->add_flag_callback(
      "--help-markdown",
      [] {
        std::cout << io::config_reference_markdown();
        throw CLI::Success();
      },
      "print the settings reference as Markdown (docs/config.md) and exit");
  return command;
}

int run_if_launched_by_mpi(const ConfigCommandOptions& o, bool evaluation) {
#ifdef GEOTRAIN_HAVE_MPI_TRAINING
  if (!runtime::launched_by_mpi()) return -1;
  return evaluation ? runtime::run_distributed_evaluation(o.config_file, o.overrides, std::cout)
                    : runtime::run_distributed_training(o.config_file, o.overrides, std::cout);
#else
  (void)o, (void)evaluation;
  return -1;
#endif
}

void add_train_command(CLI::App& app, TrainCommandOptions& o) {
  add_config_subcommand(app, "train", "Train a GPT model, alone or as every rank of an mpirun/srun job", o);
}

int run_train_command(const TrainCommandOptions& o) {
  if (const int code = run_if_launched_by_mpi(o, false); code >= 0) return code;
  const io::Config loaded = io::read_config(o.config_file, o.overrides);
  if (loaded.pipeline.stages > 1) {
    throw loaded.error("pipeline.stages",
                     std::to_string(loaded.pipeline.stages) + " stages need a multiple of " +
                     std::to_string(loaded.pipeline.stages) +
                     " ranks: start geotrain under mpirun or srun (this geotrain runs alone)");
  }
  runtime::RunInputs inputs = runtime::prepare_run(loaded, io::load_model(loaded).model);
  const io::Config& config = inputs.config;
  const std::string timing_path = io::expand_run_name(config.timing.file);
  const runtime::TrainResult result = runtime::train_single_rank(inputs, std::cout);
  std::ostream& text = runtime::text_stream(config, std::cout);
  if (!timing_path.empty()) {
    const runtime::JobDescription job = runtime::single_rank_job(result.device, inputs.layout);
    const runtime::RankTiming own{result.events, result.step_seconds, result.stage_parameters};
    io::write_timing_file(timing_path, runtime::make_timing_run(config, inputs.model, job, result, {own}));
    if (!config.train.quiet) text << "timing: " << timing_path << "\n";
  }
  if (result.stopped_by_signal) {
    std::cerr << runtime::stopped_summary(result);
    return kExitRunError;
  }
  text << final_summary(result);
  return 0;
}

}  // namespace geotrain::cli
